"""Collectives on 2 gloo worker processes: every op checked and timed, algbw and busbw from the
samples, clean shutdown, a failed point recorded, a killed or hung peer reported within the
timeout, and no process left behind (also when the parent itself dies)."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from statistics import median

import pytest

from a800lab.core.results import read_records
from a800lab.workloads.comm.collectives import OPS, busbw_gbs
from a800lab.workloads.comm.launcher import RankGroup, RankGroupError, process_state
from a800lab.workloads.comm.runs import WORKER, run_comm

POINT = {"job": "point", "workload": "comm", "settings": {"budget_s": 0.02},
         "params": {"op": "all_reduce", "size_bytes": 4096, "world_size": 2, "backend": "gloo"}}


def children() -> list[int]:
    """Live (not zombie) comm worker processes started by this test process (other fixtures,
    a JupyterLab server for instance, may have children of their own)."""
    mine = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if int(fields[1]) == os.getpid() and fields[0] != "Z" and WORKER.encode() in command:
                mine.append(int(entry.name))
    return mine


def gone(pids) -> bool:
    """Every pid has exited (a zombie waiting for a reaper that is not us counts as exited)."""
    return all(process_state(pid) in ("gone", "exited (zombie)") for pid in pids)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("comm") / "comm.jsonl"
    started = time.perf_counter()
    result = run_comm("comm", {"op": list(OPS), "size_bytes": [1024, 2**18]}, world_size=2,
                      backend="gloo", settings={"budget_s": 0.02}, out=out)
    return out, result, time.perf_counter() - started


def test_every_collective_is_checked_and_timed(swept):
    out, result, took_s = swept
    assert [(r.params["op"], r.params["size_bytes"], r.outcome) for r in result.records] == [
        (op, size, "ok") for op in OPS for size in (1024, 2**18)]
    for record in result.records:
        assert record.params["world_size"] == 2 and record.params["backend"] == "gloo"
        assert record.env["mode"] == "CPU fallback" and record.throughput_unit == "GB/s busbw"
        m = record.metrics
        time_ms = median(list(record.time_ms))
        assert m["algbw_gbs"] == pytest.approx(m["message_bytes"] / (time_ms * 1e-3) / 1e9)
        assert record.throughput == pytest.approx(
            busbw_gbs(record.params["op"], m["message_bytes"], time_ms, 2))
        assert len(record.time_ms) >= 5
    assert len(read_records(out)) == len(result.records)
    assert took_s < 30


def test_shutdown_is_clean_and_resume_starts_nothing(swept):
    out, result, _ = swept
    assert children() == []
    again = run_comm("comm", {"op": list(OPS), "size_bytes": [1024, 2**18]}, world_size=2,
                     backend="gloo", out=out)
    assert again.skipped == len(result.records) and again.records == []


def test_a_failed_point_is_a_record_and_a_killed_peer_ends_the_run_with_its_name():
    group = RankGroup(WORKER, world_size=2, env={"A800LAB_BACKEND": "gloo"}, timeout_s=20)
    group.start()
    # a setting the point function does not take fails inside every rank, like a bug would:
    # an error record, and the group goes on
    failed = json.loads(group.request({**POINT, "settings": {"no_such_setting": 1}}))
    assert failed["outcome"] == "error" and "no_such_setting" in failed["message"]
    assert json.loads(group.request(POINT))["outcome"] == "ok"
    os.kill(group.pids[1], signal.SIGKILL)
    started = time.perf_counter()
    with pytest.raises(RankGroupError, match=r"rank 1 \(pid \d+\) was killed by signal SIGKILL"):
        group.request(POINT)
    assert time.perf_counter() - started < 5  # noticed at once, not after the 20 s timeout
    assert gone(group.pids) and children() == []


def test_a_hung_peer_ends_the_run_after_the_timeout():
    group = RankGroup(WORKER, world_size=2, env={"A800LAB_BACKEND": "gloo"}, timeout_s=1.5)
    group.start()
    os.kill(group.pids[1], signal.SIGSTOP)
    started = time.perf_counter()
    with pytest.raises(RankGroupError,
                       match=r"within 1.5 s: rank 0 .*rank 1 \(pid \d+\) stopped"):
        group.request(POINT)
    assert 1.5 <= time.perf_counter() - started < 4
    assert gone(group.pids) and children() == []


def test_workers_leave_when_their_parent_dies():
    # the parent loads only the launcher (no torch): it starts quickly, the workers are real
    launcher = Path(__file__).resolve().parents[1] / "a800lab" / "workloads" / "comm" / \
        "launcher.py"
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import importlib.util, time
        spec = importlib.util.spec_from_file_location("launcher", {str(launcher)!r})
        launcher = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(launcher)
        group = launcher.RankGroup({WORKER!r}, world_size=2, env={{"A800LAB_BACKEND": "gloo"}})
        group.start()
        print(*group.pids, flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    pids = [int(p) for p in parent.stdout.readline().split()]
    assert len(pids) == 2 and not gone(pids)
    parent.kill()  # no close(), no atexit: the workers only see their stdin close
    parent.wait()
    deadline = time.monotonic() + 10
    while not gone(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gone(pids)


@pytest.mark.gpu
def test_nccl_collectives_on_two_gpus():
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs: NCCL takes one GPU per rank")
    result = run_comm("comm", {"op": list(OPS), "size_bytes": [2**20, 2**26]}, world_size=2,
                      backend="nccl", settings={"budget_s": 0.05})
    assert [r.outcome for r in result.records] == ["ok"] * len(result.records)
    for record in result.records:
        assert record.env["mode"] == "GPU" and record.params["backend"] == "nccl"
        if record.metrics.get("link_gbs"):  # a card the datasheet table knows
            assert record.metrics["pct_of_link"] == pytest.approx(
                100 * record.throughput / record.metrics["link_gbs"])
    assert children() == []
