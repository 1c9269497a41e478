"""`a800lab report`'s runner on a CPU: the quick battery end to end (2 gloo ranks included),
resume after Ctrl-C, a torn file, a changed environment, Stop, the budget, bad input, and the
CLI."""

from __future__ import annotations

import json
import shutil

import pytest

from a800lab.cli import main
from a800lab.core.cancel import CancelToken
from a800lab.core.results import read_records
from a800lab.report.claims import (
    DOCUMENTED,
    FAILS,
    HOLDS,
    METHOD_ON_CPU,
    NOT_MEASURABLE,
    NOT_MEASURED,
    STATUSES,
    UNTESTABLE,
)
from a800lab.report.plan import CONFIRM, Plan, Step, plan_battery
from a800lab.report.register import REGISTER
from a800lab.report.run import POINTS_FILE, REPORT_FILE, run_report


def small_plan() -> Plan:
    """Four cheap points: a 128^3 peak, two CPU tile configs of a 64^3 matmul, and the faster
    one timed again."""
    tiles = tuple({"m": 64, "n": 64, "k": 64, "precision": "fp32", "backend": "cpu_blocked",
                   "block_m": b, "block_n": b, "block_k": 32, "group_m": 1} for b in (16, 64))
    return Plan("quick", "cpu", 0, (
        Step("peak", "peak", ({"device": "cpu", "precision": "fp32", "size": 128},),
             {"budget_s": 0.05}, 0.5),
        Step("tiles", "tiles", tiles, {"budget_s": 0.05, "warmup_s": 0.01}, 0.5),
        Step("tiles_confirm", "tiles", ({CONFIRM: "tiles"},), {"budget_s": 0.05,
                                                              "warmup_s": 0.01}, 0.5,
             confirms="tiles")), plan_battery("quick", "cpu").untestable)


def by_id(report: dict) -> dict:
    return {c["id"]: c for c in report["claims"]}


def test_the_quick_cpu_battery_end_to_end(quick_cpu_report):
    report, folder = quick_cpu_report
    plan = plan_battery("quick", "cpu")
    assert report["complete"] and report["stopped"] == ""
    assert report["points"]["planned"] == plan.points == report["points"]["measured"]
    assert report["points"]["ok"] == plan.points, [
        r.message for r in read_records(folder / POINTS_FILE) if r.outcome != "ok"]
    assert len(read_records(folder / POINTS_FILE)) == plan.points
    assert json.loads((folder / REPORT_FILE).read_text())["claims"] == report["claims"]
    assert report["scope"] == "CPU fallback" and report["device"] == "cpu"
    assert report["report_version"] == 3
    claims = by_id(report)
    assert list(claims) == [c.id for c in REGISTER]        # every claim has a row
    for claim in REGISTER:
        row = claims[claim.id]
        assert row["status"] in STATUSES
        if row["status"] not in (HOLDS, FAILS):
            assert row["reason"], row
        if claim.not_measurable:
            assert row["status"] == NOT_MEASURABLE
        elif claim.doc:
            assert row["status"] == claim.doc.verdict in DOCUMENTED
        elif not claim.cpu_answers:   # no GPU claim holds, fails or is inconclusive here
            assert row["status"] in (METHOD_ON_CPU, UNTESTABLE, NOT_MEASURABLE), row
            assert row["status"] != NOT_MEASURABLE or claim.id == "case_hospital", row
    for method in ("tile_shape", "tc_peak", "idle_cut", "placement", "energy", "compression",
                   "embeddings_fp32", "amp_trains", "unit_util", "nlp_speed_memory",
                   "overall"):
        assert claims[method]["status"] == METHOD_ON_CPU and claims[method]["measured"], method
    hospital = claims["case_hospital"]      # the customer's 23 -> 9 ms: its method shown
    assert hospital["status"] == NOT_MEASURABLE and "fp16" in hospital["measured"]
    for answered in ("accum_traffic", "accum_frequency"):
        assert claims[answered]["status"] == HOLDS, claims[answered]
    snippet = claims["accum_snippet"]        # the snippet as written gives no large batch
    assert snippet["status"] == FAILS       # TensorFlow's run where prepared, else torch's
    assert "zero_grad" in snippet["measured"] or "torch emulation" in snippet["measured"]
    assert claims["hierarchical"]["status"] == UNTESTABLE
    assert "needs ranks on more than one node" in claims["hierarchical"]["reason"]
    for gpu_only in ("tf32_speed", "half_speed", "fp8_speed", "tf32_accuracy",
                     "sparsity_speed", "sparsity_util", "buffers_resnet50", "mp_memory",
                     "amp_speed"):
        assert claims[gpu_only]["status"] == UNTESTABLE
        assert "no NVIDIA GPU" in claims[gpu_only]["reason"]
    for resnet in ("buffers_resnet50", "mp_memory", "amp_speed"):   # the Transformer beside
        assert "the Transformer" in claims[resnet]["measured"]
    # the CPU's max-batch agreement is by construction: reported, never called a pass
    assert claims["max_batch"]["status"] == UNTESTABLE and claims["max_batch"]["measured"]
    card = report["health"]["cards"][0]
    assert card["device"] == "cpu" and card["matmul_tflops"] > 0 and card["copy_gbs"] > 0
    assert "untestable" in report["health"]["busbw"]
    assert report["figures"]["tile_shape.ratio"]["value"] > 0
    assert any(s["config"].startswith("guide ") for s in report["series"]["tiles"])


def test_a_finished_report_resumes_without_measuring_ranks_included(quick_cpu_report, tmp_path):
    _, folder = quick_cpu_report
    shutil.copy(folder / POINTS_FILE, tmp_path / POINTS_FILE)
    again = []
    report = run_report("quick", tmp_path, torch_threads=1, on_record=again.append)
    assert again == [] and report["complete"]   # the ranks' records match the plan's points


def test_points_of_an_earlier_battery_are_measured_again_not_judged(tmp_path):
    """A folder from before the claim register: same steps and params, metrics of another
    meaning (or none). They are re-measured; today's judges never read them."""
    import dataclasses

    first = run_report(out=tmp_path, plan=small_plan())
    path = tmp_path / POINTS_FILE
    old = [dataclasses.replace(r, metrics={k: v for k, v in r.metrics.items()
                                           if k != "battery_version"})
           for r in read_records(path)]
    path.write_text("".join(r.to_json() + "\n" for r in old))
    again = []
    second = run_report(out=tmp_path, plan=small_plan(), on_record=again.append)
    assert len(again) == first["points"]["planned"] == 4   # every old point measured anew
    assert second["complete"] and second["points"]["measured"] == 4
    assert all(r.metrics["battery_version"] >= 4 for r in again)


@pytest.mark.usefixtures("one_torch_thread")
def test_an_interrupted_report_resumes_where_it_stopped(tmp_path):
    count = []

    def interrupt_after_two(record):
        count.append(record)
        if len(count) == 2:
            raise KeyboardInterrupt

    first = run_report(out=tmp_path, plan=small_plan(), on_record=interrupt_after_two)
    assert first["stopped"] == "interrupted" and not first["complete"]
    assert first["points"] == {"planned": 4, "measured": 2, "ok": 2, "failed": 0,
                               "not_measured": 2}
    assert by_id(first)["tc_peak"]["status"] == NOT_MEASURED
    assert "run the same command again" in by_id(first)["tc_peak"]["reason"]
    # a crash mid-write leaves a torn line: it is skipped, nothing measured is lost
    with open(tmp_path / POINTS_FILE, "a") as f:
        f.write('{"workload": "tiles", "par')
    again = []
    with pytest.warns(UserWarning, match="torn"):
        second = run_report(out=tmp_path, plan=small_plan(), on_record=again.append)
    assert [(r.label, r.params["block_m"]) for r in again][0] == ("tiles", 64)   # the missing
    assert [r.label for r in again] == ["tiles", "tiles_confirm"]   # then the winner re-timed
    assert second["complete"] and second["points"]["measured"] == 4
    assert by_id(second)["tc_peak"]["status"] == METHOD_ON_CPU
    assert len(second["sessions"]) == 2
    assert second["wall_s"] == pytest.approx(sum(s["wall_s"] for s in second["sessions"]))
    third = run_report(out=tmp_path, plan=small_plan())   # nothing left: a sitting of its own
    assert len(third["sessions"]) == 3
    (tmp_path / POINTS_FILE).unlink()   # points gone: the sittings that measured them go too
    fourth = run_report(out=tmp_path, plan=small_plan())
    assert len(fourth["sessions"]) == 1 and fourth["points"]["measured"] == 4


@pytest.mark.usefixtures("one_torch_thread")
def test_points_of_another_environment_are_left_out_and_named(tmp_path):
    run_report(out=tmp_path, plan=small_plan())
    lines = (tmp_path / POINTS_FILE).read_text().splitlines()
    moved = []
    for line in lines:
        d = json.loads(line)
        d["env"]["fingerprint"] = "another-machine"
        moved.append(json.dumps(d))
    (tmp_path / POINTS_FILE).write_text("\n".join(moved) + "\n")
    earlier = json.loads((tmp_path / REPORT_FILE).read_text())
    earlier["environment"]["fingerprint"] = "another-machine"
    (tmp_path / REPORT_FILE).write_text(json.dumps(earlier))
    again = []
    report = run_report(out=tmp_path, plan=small_plan(), on_record=again.append)
    assert len(again) == 4 and report["complete"]
    assert "another environment" in report["notes"][0] and "4 record(s)" in report["notes"][0]
    assert len(report["sessions"]) == 1   # the earlier sittings were another machine's


@pytest.mark.usefixtures("one_torch_thread")
def test_stop_and_the_budget_keep_what_was_measured(tmp_path):
    cancel = CancelToken()
    stopped = run_report(out=tmp_path / "stop", plan=small_plan(), cancel=cancel,
                         on_record=lambda r: cancel.cancel())
    assert stopped["stopped"] == "cancelled" and stopped["points"]["measured"] == 1
    budget = run_report(out=tmp_path / "budget", plan=small_plan(), budget_s=1e-6)
    assert budget["stopped"] == "budget" and budget["points"]["measured"] == 1  # one per sitting


@pytest.mark.parametrize("kwargs, match", [
    ({"mode": "fast"}, "mode 'fast'"),
    ({"budget_s": 0}, "budget_s=0 must be a positive number of seconds"),
    ({"price_per_gpu_hour_usd": -1.0}, "price_per_gpu_hour_usd=-1.0"),
    ({"device": "tpu"}, "unknown device 'tpu'"),
])
def test_bad_options_are_refused_before_anything_runs(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        run_report(out=tmp_path / "r", **kwargs)
    assert not (tmp_path / "r").exists()


def test_an_out_path_that_is_a_file_and_a_corrupt_points_file_are_named(tmp_path):
    afile = tmp_path / "report.txt"
    afile.write_text("x")
    with pytest.raises(ValueError, match="is a file; give a directory"):
        run_report(out=afile, plan=small_plan())
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / POINTS_FILE).write_text("not json\n{}\n")
    with pytest.raises(ValueError, match=rf"{POINTS_FILE}:1"):
        run_report(out=folder, plan=small_plan())
    assert (folder / POINTS_FILE).read_text() == "not json\n{}\n"   # nothing overwritten


@pytest.mark.usefixtures("one_torch_thread")
def test_cli_report_stops_on_its_budget_exits_3_and_resumes(tmp_path, capsys):
    out = tmp_path / "rep"
    code = main(["report", "--out", str(out), "--budget-s", "0.001", "--threads", "1"])
    assert code == 3
    report = json.loads((out / REPORT_FILE).read_text())
    assert report["stopped"] == "budget" and report["points"]["measured"] == 1
    html = (out / "report.html").read_text()
    assert "<html" in html.lower() and report["device_name"] in html
    text = capsys.readouterr()
    assert "not complete: run the same command again" in text.out
    assert "[1/" in text.err and "report.html" in text.err
    assert main(["report", "--out", str(out), "--budget-s", "0.001", "--threads", "1"]) == 3
    assert json.loads((out / REPORT_FILE).read_text())["points"]["measured"] == 2


def test_cli_refuses_bad_report_options(tmp_path, capsys):
    assert main(["report", "--out", str(tmp_path), "--price-per-gpu-hour", "0"]) == 2
    assert "price_per_gpu_hour_usd=0.0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["report", "--quick", "--full"])
    with pytest.raises(SystemExit):
        main(["report", "--compare", "a", "b", "--budget-s", "5"])


@pytest.mark.usefixtures("one_torch_thread")
def test_cli_compare_two_recorded_reports(tmp_path, capsys):
    run_report(out=tmp_path / "a", plan=small_plan())
    run_report(out=tmp_path / "b", plan=small_plan())
    out = tmp_path / "cmp"
    assert main(["report", "--compare", str(tmp_path / "a"), str(tmp_path / "b"),
                 "--out", str(out)]) == 0
    comparison = json.loads((out / "compare.json").read_text())
    ratios = {f["key"]: f["ratio"] for f in comparison["figures"]}
    assert ratios["tc_peak.pct_of_measured"] > 0 and "health.cpu.fp32.matmul_tflops" in ratios
    assert "<html" in (out / "compare.html").read_text().lower()
    assert "best tile, % of measured" in capsys.readouterr().out
    assert main(["report", "--compare", str(tmp_path / "a"), str(tmp_path / "nothing")]) == 2
    assert "nothing" in capsys.readouterr().err
