"""The verdict functions on records this machine really measured: the quick CPU battery (2 gloo
ranks included, run once per session), every judge finding its method in them, the edge cases
rebuilt from real records (TF32 that did not engage, zero exposed communication, every point out
of memory, a changed price), and the same verdict for every claim in the JSON, the HTML page,
the terminal and the panel."""

from __future__ import annotations

import dataclasses
import html
import json
import re
import shutil

import pytest

from a800lab.cli.report import format_verdicts
from a800lab.core.environment import environment, fingerprint
from a800lab.core.results import read_records
from a800lab.core.sweep import measure_point
from a800lab.report.claims import FAILED, HOLDS, LOOKS, METHOD_ON_CPU
from a800lab.report.html import render_report_html
from a800lab.report.judge import Context, newest_by_step
from a800lab.report.plan import Plan, Step, plan_battery
from a800lab.report.register import CLAIMS, REGISTER
from a800lab.report.run import POINTS_FILE, REPORT_FILE, build
from a800lab.report.verdicts import judge_claims
from a800lab.widgets.report_panel import verdicts_html
from a800lab.workloads.tiles.point import tiled_matmul_point
from a800lab.workloads.training.numerics import held_out_point

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def real_records(quick_cpu_report):
    _, folder = quick_cpu_report
    return read_records(folder / POINTS_FILE)


def gpu_plan_of(records, *extra: Step) -> Plan:
    """A GPU box's plan whose steps hold exactly `records`' points (and `extra` steps), to
    judge real CPU records as if they came from one: the judges themselves, no CPU rule."""
    names = dict.fromkeys(r.label for r in records if r.label not in {s.name for s in extra})
    return Plan("quick", "cuda:0", 2, tuple(
        Step(n, n, tuple(r.params for r in records if r.label == n)) for n in names) + extra,
        {})


def env():
    e = environment("cpu")
    return {**e, "fingerprint": fingerprint(e)}


def test_every_judge_finds_its_method_in_the_real_cpu_records(quick_cpu_report):
    plan = plan_battery("quick", "cpu")
    ctx = Context(newest_by_step(real_records(quick_cpu_report)), plan, "this CPU", 2.0)
    judged = []
    for claim in REGISTER:
        if not claim.judge or claim.id in plan.untestable:
            continue
        finding = claim.judge(ctx, claim)
        assert finding is not None and finding.measured, claim.id
        judged.append(claim.id)
    assert set(judged) == {
        "tc_peak", "idle_cut", "compression", "tile_shape", "accum_frequency", "placement",
        "hierarchical", "unit_util", "nlp_speed_memory", "energy", "accum_traffic", "overall",
        "embeddings_fp32", "accum_snippet", "amp_trains", "max_batch", "case_hospital",
        "device_snippet"}


def test_the_real_records_behind_the_cpu_answered_claims(quick_cpu_report):
    report, _ = quick_cpu_report
    ddp = {(r.params["hook"], r.params["sync"]): r for r in real_records(quick_cpu_report)
           if r.label == "ddp"}
    every, quiet = ddp[("allreduce", "every_micro_batch")], ddp[("allreduce", "no_sync")]
    assert every.metrics["allreduce_calls_per_sample"] > quiet.metrics[
        "allreduce_calls_per_sample"]
    powersgd = ddp[("powersgd", "no_sync")]
    assert powersgd.metrics["compressed"] and powersgd.metrics["sent_vs_fp32"] < 0.5
    by_id = {c["id"]: c for c in report["claims"]}
    assert by_id["accum_traffic"]["status"] == HOLDS
    assert "75%" in by_id["accum_traffic"]["measured"]   # 4 micro-batches, one sync
    assert "powersgd + no_sync" in by_id["compression"]["measured"]
    assert by_id["compression"]["status"] == METHOD_ON_CPU


def test_real_training_points_carry_their_mfu_and_the_tiles_their_roofline(quick_cpu_report):
    report, _ = quick_cpu_report
    records = real_records(quick_cpu_report)
    amp = [r for r in records if r.label == "amp" and r.outcome == "ok"]
    assert amp
    for r in amp:   # achieved TFLOP/s = model FLOPs per sample x samples/s
        m = r.metrics
        assert m["model_flops_per_sample"] > 0 and m["datasheet_peak_tflops"] is None
        assert m["achieved_tflops"] == pytest.approx(m["model_flops_per_sample"] *
                                                     r.throughput / 1e12)
    mfu = next(c for c in report["claims"] if c["id"] == "unit_util")
    assert mfu["status"] == METHOD_ON_CPU and "MFU needs a GPU" in mfu["measured"]
    step = next(r for r in amp if r.params["precision"] == "fp16")
    assert f"= {step.metrics['achieved_tflops']:.3g} TFLOP/s" in mfu["measured"]
    peak = next(r for r in records if r.label == "peak")
    assert "of the fp32 matmul rate measured here" in mfu["measured"]
    rows, roofs = report["series"]["roofline"], report["series"]["roofs"]
    n = 256   # the CPU battery's tile shape, fp32: 2 n^3 FLOP over 3 n^2 x 4 bytes
    assert rows and all(r["intensity_flop_per_byte"] == pytest.approx(2 * n / 12) for r in rows)
    assert {r["kind"] for r in rows} == {"tile", "guide", "cublas"}
    assert roofs["datasheet_tflops"] is None
    assert roofs["measured_tflops"] == peak.throughput
    assert roofs["measured_gbs"] == peak.metrics["copy_gbs"]


def test_tf32_that_did_not_engage_fails_on_real_records():
    """Two real training runs on this CPU, one under the name tf32: TF32 cannot engage on a CPU,
    so its matmul probe reads IEEE fp32, and the verdict says so instead of 'no cost'."""
    records = []
    for seed in (0, 1):
        r = measure_point(held_out_point, {"precision": "fp32", "size": "tiny",
                                           "batch_size": 16, "train_steps": 4, "seed": seed},
                          workload="held_out", device="cpu", env=env(), label="tf32_loss")
        records += [r, dataclasses.replace(r, params={**r.params, "precision": "tf32"})]
    v = {c["id"]: c for c in judge_claims(records, gpu_plan_of(records), device_name="A800",
                                          price_per_gpu_hour_usd=2.0)["claims"]}
    assert v["tf32_accuracy"]["status"] == FAILED
    assert "TF32 did not engage" in v["tf32_accuracy"]["reason"]


def test_zero_exposed_communication_on_real_gloo_records(quick_cpu_report):
    """The plain run's no_sync record standing for both sync modes: no exposed communication
    at all, and every figure stays finite (nothing divides by a communication time)."""
    records = real_records(quick_cpu_report)
    ddp = [r for r in records if r.label == "ddp"]
    quiet = next(r for r in ddp if r.params["hook"] == "allreduce" and
                 r.params["sync"] == "no_sync")
    records = [r for r in ddp if r.params["sync"] == "no_sync"] + [dataclasses.replace(
        quiet, params={**quiet.params, "sync": "every_micro_batch"})] + [
        r for r in records if r.label == "ddp_confirm"]
    confirm = next(s for s in plan_battery("quick", "cpu").steps if s.name == "ddp_confirm")
    v = {c["id"]: c for c in judge_claims(records, gpu_plan_of(records, confirm),
                                          device_name="A800", price_per_gpu_hour_usd=2.0)[
        "claims"]}
    text = v["compression"]["measured"]
    assert "communication share, estimated from its two sync modes" in text
    assert "share" in text and "inf" not in text and "nan" not in text
    assert all(f["value"] is not None and f["value"] < 1e6
               for f in v["compression"]["figures"].values())


def test_every_point_out_of_memory_is_failed_on_real_records():
    """The guide's tiles at a size no machine holds: real "oom" records (refused before
    allocating), and the claim reads "failed", not "not measured yet"."""
    size = 300_000   # 3 x 360 GB of fp32 operands
    points = [{"m": size, "n": size, "k": size, "precision": "fp32", "backend": "cpu_blocked",
               "block_m": b, "block_n": 16, "block_k": 16, "group_m": 1} for b in (16, 32)] + [
        {"m": size, "n": size, "k": size, "precision": "fp32", "backend": "torch"}]
    records = [measure_point(tiled_matmul_point, p, workload="tiles", device="cpu", env=env(),
                             label="guide_tiles") for p in points]
    assert {r.outcome for r in records} == {"oom"}
    plan = Plan("quick", "cpu", 0, (Step("guide_tiles", "tiles", tuple(points)),), {})
    v = {c["id"]: c for c in judge_claims(records, plan, device_name="CPU",
                                          price_per_gpu_hour_usd=2.0)["claims"]}
    assert v["tile_shape"]["status"] == FAILED
    assert "3 of 3 point(s) failed: out of memory" in v["tile_shape"]["reason"]


def test_a_changed_price_rejudges_the_real_points_and_changes_no_verdict(quick_cpu_report,
                                                                       tmp_path):
    report, folder = quick_cpu_report
    shutil.copy(folder / POINTS_FILE, tmp_path / POINTS_FILE)
    shutil.copy(folder / REPORT_FILE, tmp_path / REPORT_FILE)
    dear = build(plan_battery("quick", "cpu"), tmp_path, report["environment"],
                 price_per_gpu_hour_usd=20.0)
    assert [c["status"] for c in dear["claims"]] == [c["status"] for c in report["claims"]]
    assert dear["price_per_gpu_hour_usd"] == 20.0 and dear["complete"]


# ---- one verdict, four renderings --------------------------------------------------------------
def html_statuses(text: str) -> dict[str, str]:
    cards = re.findall(r'<article class="claim v-[a-z-]+" id="claim-([a-z0-9_]+)"><header>'
                       r'<span class="status ([a-z-]+)">([^<]*)</span>', text)
    return {cid: (css, html.unescape(status)) for cid, css, status in cards}


def test_json_html_terminal_and_panel_show_the_same_verdict(quick_cpu_report):
    report, folder = quick_cpu_report
    saved = {c["id"]: c["status"] for c in json.loads((folder / REPORT_FILE).read_text())[
        "claims"]}
    assert list(saved) == [c.id for c in REGISTER]
    page = html_statuses(render_report_html(report))
    assert set(page) == set(saved)
    for cid, status in saved.items():
        assert page[cid] == (LOOKS[status].css, status), cid
    lines = re.findall(r"^  \[([^\]]+)\] ([a-z0-9_]+) \(", format_verdicts(report), re.M)
    assert {cid: status for status, cid in lines} == saved
    panel = dict(re.findall(r'data-claim="([a-z0-9_]+)"><summary style="[^"]*"><span '
                            r'style="[^"]*">([^<]*)</span>', verdicts_html(report["claims"])))
    assert {cid: html.unescape(s).removesuffix(" (noisy)") for cid, s in panel.items()} == saved
    # drawn per status: each status its own look, a CPU's method neither green nor red
    assert len({LOOKS[s].css for s in saved.values()}) == len(set(saved.values()))
    assert LOOKS[METHOD_ON_CPU].colour not in (LOOKS[HOLDS].colour, "#c62828")


def test_the_terminal_colours_each_status_on_a_tty(quick_cpu_report):
    report, _ = quick_cpu_report
    coloured = format_verdicts(report, colour=True)
    for claim in report["claims"]:
        assert f"\033[{LOOKS[claim['status']].ansi}m[{claim['status']}]\033[0m" in coloured
    assert "\033[" not in format_verdicts(report)
    assert all(c in CLAIMS for c in re.findall(r"\] ([a-z0-9_]+) \(", coloured))
