"""CommExplorer driven without a browser: a collectives run on 2 gloo ranks streams its points
into the panel, each view draws only its own points, kept ranks serve the next Run until
close(), and a rank killed mid-run ends the run in the status line with no process left
behind."""

import os
import signal
import time

from test_comm_workers import children

from a800lab.widgets import CommExplorer


def test_collectives_run_streams_points_into_the_panel(tmp_path):
    panel = CommExplorer(recorded_dir=tmp_path, keep_ranks=True)
    assert panel.sweep_axis.value == "size_bytes"
    assert panel.run(wait=True, view="collectives", op=["all_reduce", "broadcast"],
                     size_bytes=[4096, 65536])
    assert panel.status_text.startswith("Done: 4 points (4 ok)"), panel.status_text
    df = panel.results
    assert list(zip(df["op"], df["size_bytes"], strict=True)) == [
        ("all_reduce", 4096), ("all_reduce", 65536), ("broadcast", 4096), ("broadcast", 65536)]
    assert "hook" not in df and (df["world_size"] == 2).all()
    assert "busbw and time vs message size" in panel.caption.value
    assert "gloo on one machine" in panel.table.value
    titles = [ax.get_title() for ax in panel.figure.axes]
    assert "bus bandwidth vs message size" in titles
    assert "CPU fallback" in panel.figure._suptitle.get_text()
    panel.view.value = "hooks"  # another view: none of these points belong to it
    panel.refresh()
    assert "no points of this view yet" in panel.table.value
    assert "nan" not in panel.caption.value  # no "op=nan (the control reads all_reduce)"
    kept = children()
    assert len(kept) == 2  # keep_ranks: the ranks wait for the next Run
    assert panel.run(wait=True, view="collectives", op="all_gather", size_bytes=[4096])
    assert panel.status_text.startswith("Done: 1 points (1 ok)") and children() == kept
    panel.close()
    assert children() == []


def test_a_rank_killed_mid_run_ends_it_in_the_status_line(tmp_path):
    panel = CommExplorer(recorded_dir=tmp_path, timeout_s=30)
    assert panel.run(view="collectives", size_bytes=[2**20, 2**21, 2**22, 2**23])
    deadline = time.monotonic() + 30
    while panel.progress.value < 1 and time.monotonic() < deadline:  # a point has arrived
        time.sleep(0.02)
    os.kill(children()[-1], signal.SIGKILL)
    panel.wait(timeout_s=30)
    assert not panel.running
    assert "Run failed: RankGroupError" in panel.status_text
    assert "was killed by signal SIGKILL" in panel.status_text
    assert not panel.run_button.disabled  # usable again
    assert children() == []
