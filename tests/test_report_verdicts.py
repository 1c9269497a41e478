"""Every judge of the report on synthetic GPU records: holds, does not hold and inconclusive
(within noise) at the claim's own figure over three independent runs, a winner re-timed below
the figure in its confirmation runs, counted figures never inconclusive, the readings beside
the literal one, the rows the issue found testing the wrong thing (hierarchical on one box, the
snippet, ResNet-50 without torchvision, diverged baselines), the CPU rule and the health
section. The same judges on records this machine really measured are in
test_report_cpu_records.py; runs and each figure's own spread in test_report_runs.py."""

from __future__ import annotations

import dataclasses

import pytest

from a800lab.core.results import Record
from a800lab.report.claims import (
    DOCUMENTED,
    FAILED,
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    JUDGED,
    METHOD_ON_CPU,
    NOT_MEASURABLE,
    NOT_MEASURED,
    UNTESTABLE,
)
from a800lab.report.plan import CONFIRM, Plan, Step, plan_battery, resolve_points
from a800lab.report.register import CLAIMS, REGISTER
from a800lab.report.rules import three_way
from a800lab.report.verdicts import judge_claims
from a800lab.workloads.training.point import mfu_figures

MIB = 2**20
A800 = "NVIDIA A800-SXM4-80GB"
STEADY = (10.0, 10.0, 10.0, 10.0, 10.0)
CONFIRMS = {s.name: s for s in plan_battery("full", "cpu").steps if s.confirms}   # 3 runs
RUN_STEPS = {"peak", "amp", "pipeline", "placement", "energy", "energy_sparse", "sparsity",
             "hierarchical", *CONFIRMS}   # the steps whose points the battery runs 3 times


def spread(rel: float):
    """Time samples whose half-IQR is `rel` of their median (median 10 ms)."""
    d = 10 * rel
    return (10 - d, 10 - d, 10, 10 + d, 10 + d)


def rec(step: str, params: dict, throughput: float | None = 1.0, noisy: bool = False,
        outcome: str = "ok", time_ms=STEADY, message: str = "", memory=None,
        **metrics) -> Record:
    return Record(workload=step, params=params, outcome=outcome, message=message,
                  throughput=throughput if outcome == "ok" else None, metrics=metrics,
                  label=step, time_ms=tuple(time_ms), noise={"noisy": noisy},
                  memory=memory or {})


def three(records, factors=(1.0, 1.0, 1.0)) -> list[Record]:
    """`records` as the battery measures them: those of a step it runs again, in runs 0, 1, 2
    (throughput x the run's factor); the others once."""
    out = []
    for r in records:
        if r.label not in RUN_STEPS:
            out.append(r)
            continue
        out += [dataclasses.replace(r, params={**r.params, "run": i}, throughput=(
            r.throughput * f if r.throughput else r.throughput)) for i, f in enumerate(factors)]
    return out


def judge(records, device: str = "cuda:0", untestable: dict | None = None,
          missing: dict | None = None, price: float = 2.0, runs: bool = True) -> dict:
    """judge_claims on `records` (in three runs, `runs`) under a plan whose steps hold exactly
    the records' points (`missing`: {step: extra points not measured}); confirmation steps as
    the real plan's."""
    records = three(records) if runs else records
    names = list(dict.fromkeys(r.label for r in records)) + list(missing or {})
    steps = []
    for name in names:
        if name in CONFIRMS:   # its placeholders, and the fixed points the records have
            held = dataclasses.replace(CONFIRMS[name], points=tuple(
                p for p in CONFIRMS[name].points if CONFIRM in p))
            picked = [p for _, p in resolve_points(Plan("quick", device, 2, (held,), {}),
                                                   records)]
            steps.append(dataclasses.replace(held, points=held.points + tuple(
                r.params for r in records if r.label == name and r.params not in picked)))
            continue
        points = [r.params for r in records if r.label == name] + (missing or {}).get(name, [])
        steps.append(Step(name, name, tuple(points)))
    plan = Plan("quick", device, 2, tuple(steps), untestable or {})
    facts = judge_claims(records, plan, device_name=A800, price_per_gpu_hour_usd=price)
    return {c["id"]: c for c in facts["claims"]} | {"_facts": facts}


def status(records, cid: str, **kw) -> str:
    return judge(records, **kw)[cid]["status"]


# ---- the rule and the rows ---------------------------------------------------------------------
def test_the_three_way_rule_and_its_mirror_for_at_most_figures():
    assert three_way(2.6, 0.05, 2.5) == HOLDS and three_way(2.3, 0.1, 2.5) == FAILS
    assert three_way(2.45, 0.1, 2.5) == INCONCLUSIVE == three_way(2.55, 0.1, 2.5)
    assert three_way(0.01, 0.005, 0.02, at_most=True) == HOLDS
    assert three_way(0.05, 0.01, 0.02, at_most=True) == FAILS
    assert three_way(0.02, 0.01, 0.02, at_most=True) == INCONCLUSIVE
    assert three_way(41.0, 0.0, 40.0) == HOLDS and three_way(39.0, 0.0, 40.0) == FAILS


@pytest.mark.parametrize("device", ["cuda:0", "cpu"])
def test_every_row_and_documentation_verdicts_the_same_on_every_machine(device):
    v = judge([], device)
    assert [k for k in v if k != "_facts"] == [c.id for c in REGISTER]
    for claim in REGISTER:
        row = v[claim.id]
        assert row["stated"] == claim.stated and row["cites"] == list(claim.cites)
        if claim.not_measurable:
            assert row["status"] == NOT_MEASURABLE and row["reason"] == claim.not_measurable
        elif claim.doc:
            assert row["status"] == claim.doc.verdict in DOCUMENTED and row["scope"] == ""
            assert claim.doc.sources[0][2] in row["reason"] and row["measured"] == ""
        else:
            assert row["status"] == NOT_MEASURED
            assert "no step of this battery measures it" in row["reason"]


# ---- synthetic records per judge ---------------------------------------------------------------
SHAPE = {"m": 4096, "n": 4096, "k": 4096, "precision": "bf16", "backend": "triton"}


def tile(step: str, block: int, tflops: float, time_ms=STEADY, pct=None, bn=None, bk=64):
    return rec(step, {**SHAPE, "block_m": block, "block_n": bn or block, "block_k": bk,
                      "num_stages": 3}, tflops, time_ms=time_ms, pct_of_datasheet_peak=pct,
               datasheet_peak_tflops=312.0)


def tiles_for(guide_tflops: float, rel: float = 0.0, again: float | None = None):
    """A grid whose median is 100 TFLOP/s, the guide's tiles, cuBLAS fp32, and the better
    guide tile's confirmation run (`again`, default the same rate)."""
    grid = [tile("tiles", b, t) for b, t in ((64, 80.0), (128, 100.0), (256, 280.0))]
    guide = [tile("guide_tiles", 16, guide_tflops / 2, bn=16, bk=16),
             tile("guide_tiles", 32, guide_tflops, spread(rel), bn=16, bk=16)]
    fp32 = rec("guide_tiles", {"m": 4096, "n": 4096, "k": 4096, "precision": "fp32",
                               "backend": "torch"}, 19.0)
    confirm = tile("guide_tiles_confirm", 32, again or guide_tflops, spread(rel), bn=16, bk=16)
    median = tile("guide_tiles_confirm", 128, 100.0)     # the grid's median tile, again
    return grid + guide + [fp32, confirm, median]


def grid_best(pct: float, rel: float = 0.0, again: float | None = None):
    best = tile("tiles", 128, 3.12 * pct, spread(rel), pct)
    confirm = tile("tiles_confirm", 128, 3.12 * (again or pct), spread(rel), again or pct)
    return [tile("tiles", 64, 200.0, pct=64.0), best, confirm]


def peak(precision: str, tflops: float, datasheet: float, device="cuda:0", step="peak",
         name=A800, copy_gbs=1800.0, time_ms=STEADY):
    return rec(step, {"device": device, "precision": precision, "size": 8192}, tflops,
               time_ms=time_ms, card_name=name, datasheet_tflops=datasheet,
               ratio_of_datasheet=tflops / datasheet, copy_gbs=copy_gbs,
               datasheet_copy_gbs=2039.0)


def sparse(tflops: float, rel: float = 0.0, speedup: float = 1.3):
    return [peak("fp16", 280.0, 312.0),
            rec("sparsity", {"m": 8192, "n": 8192, "k": 8192, "precision": "fp16"}, tflops,
                time_ms=spread(rel), speedup=speedup)]


def usage(step: str, precision: str, power_w: float, j_per_tflop: float, rel: float = 0.0):
    """A metered run whose power samples spread by `rel` (its timings are steady)."""
    return rec(step, {"size": 8192, "precision": precision}, 10.0, j_per_tflop=j_per_tflop,
               power_w=power_w, power_w_samples=[power_w * t / 10 for t in spread(rel)],
               energy_source="energy_counter", energy_note="NVML's total-energy counter",
               cpu_s_per_tflop=0.01)


def power_chain(cut_pct: float, rel: float = 0.0):
    return [usage("energy", "fp32", 400.0, 20.0, rel), usage("energy", "fp16", 420.0, 1.4),
            usage("energy_sparse", "fp16", 400.0 * (1 - cut_pct / 100), 0.9, rel)]


def amp(model: str, precision: str, rate: float, peak_mib: float, act_mib=100.0,
        time_ms=STEADY, **more):
    size = "224" if model == "resnet50" else "gpt2_small"
    return rec("amp", {"model": model, "size": size, "batch_size": 8, "precision": precision},
               rate, time_ms=time_ms, step_peak_bytes=int(peak_mib * MIB),
               activation_bytes=int(act_mib * MIB), **more)


def pair(model: str, speed: float, saving_pct: float, rel: float = 0.0):
    return [amp(model, "fp32_default", 100.0, 1000.0, 1000.0),
            amp(model, "fp16", 100.0 * speed, 1000.0 * (1 - saving_pct / 100),
                1000.0 * (1 - saving_pct / 100), spread(rel))]


def mfu(pct: float, rel: float = 0.0):
    metrics = mfu_figures(312e12 * pct / 100 / 100.0, 100.0, {
        "peak_precision": "fp16", "datasheet_peak_tflops": 312.0,
        "datasheet_peak_source": "test", "measured_peak_tflops": None})
    return [rec("amp", {"model": "transformer", "size": "gpt2_small", "batch_size": 8,
                        "precision": "fp16"}, 100.0, time_ms=spread(rel),
                step_peak_bytes=MIB, **metrics)]


def losses(step: str, params: dict, values, start: float = 4.0, **metrics):
    return [rec(step, {**params, "seed": s}, 100.0, eval_loss=v, loss_curve=[start] * 20,
                **metrics) for s, v in enumerate(values)]


def amp_trains(base, amp_):
    p = {"model": "transformer", "size": "medium", "batch_size": 32}
    return (losses("amp_trains", {**p, "precision": "fp32_default"}, base)
            + losses("amp_trains", {**p, "precision": "fp16"}, amp_, skipped_steps=1))


def tf32_runs(base, tf32, probe_tf32=3e-4):
    p = {"model": "transformer", "size": "medium", "batch_size": 32}
    return (losses("tf32_loss", {**p, "precision": "fp32"}, base, matmul_probe_error=2e-7)
            + losses("tf32_loss", {**p, "precision": "tf32"}, tf32,
                     matmul_probe_error=probe_tf32))


def tables(fp32, fp16, plain=None):
    p = {"model": "transformer", "size": "medium", "batch_size": 32, "optimizer_state": "fp32"}
    out = (losses("embeddings", {**p, "embedding": "fp32"}, fp32, lost_update_share=0.0)
           + losses("embeddings", {**p, "embedding": "fp16"}, fp16, lost_update_share=0.4))
    return out + ([rec("embeddings", {**p, "optimizer_state": "fp16", "embedding": "fp16",
                                      "seed": 0}, 100.0, eval_loss=plain)] if plain != 0 else [])


def rung(workers: int, pin: bool, nb: bool, idle: float, idle_spread: float = 0.0,
         time_ms=STEADY):
    """A pipeline point whose per-step idle fractions spread by `idle_spread` (half-IQR)."""
    return rec("pipeline", {"num_workers": workers, "pin_memory": pin, "non_blocking": nb},
               1000.0, time_ms=time_ms, idle_fraction=idle,
               idle_per_step=[idle + d * idle_spread for d in (-1, -1, 0, 1, 1)])


def placement(ratio: float, rel: float = 0.0, reused_bytes: int = 24 * MIB):
    """All on the device, the embedding on the CPU through fresh copies, and through reused
    buffers at `ratio` x the fresh copies' samples/s."""
    lm = {"size": "gpt2_small", "batch_size": 4}
    return [rec("placement", {"placement": "all_on_device", "staging": "fresh", **lm}, 1000.0,
                table_bytes=147 * MIB, memory={"peak_allocated_bytes": 600 * MIB}),
            rec("placement", {"placement": "embedding_on_cpu", "staging": "fresh", **lm}, 800.0,
                time_ms=spread(rel), crossing_bytes_per_step=24 * MIB),
            rec("placement", {"placement": "embedding_on_cpu", "staging": "reused", **lm},
                800.0 * ratio, time_ms=spread(rel), memory={"peak_allocated_bytes": 450 * MIB},
                crossing_bytes_per_step=reused_bytes)]


def ddp(hook: str, sync: str, rate: float, loss=1.0, sent=1.0, time_ms=STEADY,
        step: str = "ddp", **more):
    metrics = {"eval_loss": loss, "sent_vs_fp32": sent, "syncs_per_step": 4 if sync ==
               "every_micro_batch" else 1, "bytes_per_sample": 1000.0 * sent * (
                   4 if sync == "every_micro_batch" else 1),
               "allreduce_calls_per_sample": 0.125 if sync == "every_micro_batch" else 0.03125}
    return rec(step, {"hook": hook, "sync": sync, "accum_steps": 4, "model": "transformer",
                      "size": "gpt2_small", "micro_batch": 8, "world_size": 8, "backend": "nccl"},
               rate, time_ms=time_ms, **{**metrics, **more})


def ddp_runs(speed: float, rel: float = 0.0, again: float | None = None, **hook_metrics):
    return [ddp("allreduce", "every_micro_batch", 1000.0, time_ms=spread(rel)),
            ddp("allreduce", "no_sync", 2000.0),
            ddp("fp16_compress", "every_micro_batch", 1300.0, sent=0.5),
            ddp("fp16_compress", "no_sync", 1000.0 * speed, **{"sent": 0.5, **hook_metrics}),
            ddp("powersgd", "no_sync", 900.0, sent=0.05),
            ddp("fp16_compress", "no_sync", 1000.0 * (again or speed), time_ms=spread(rel),
                step="ddp_confirm", **{"sent": 0.5, **hook_metrics}),
            ddp("allreduce", "every_micro_batch", 1000.0, time_ms=spread(rel),
                step="ddp_confirm")]


def collective(op: str, size: int, ms: float, hosts: int, rel: float = 0.0):
    return rec("hierarchical", {"op": op, "size_bytes": size, "world_size": 16,
                                "backend": "nccl", "ranks_per_node": 8}, 100.0,
               time_ms=[ms * t / 10 for t in spread(rel)], hosts=hosts)


def hier(cut_pct: float, hosts: int = 2, rel: float = 0.0):
    return [collective("all_reduce", 2**24, 0.5, hosts),
            collective("hierarchical_all_reduce", 2**24, 0.6, hosts),
            collective("all_reduce", 2**30, 12.0, hosts, rel),
            collective("hierarchical_all_reduce", 2**30, 12.0 * (1 - cut_pct / 100), hosts, rel)]


def snippet(gap: float, snippet_gap: float):
    return [rec("accumulation", {"model": "transformer", "batch_size": 64, "accum_steps": 1},
                400.0, step_peak_bytes=1000 * MIB),
            rec("accumulation", {"model": "transformer", "batch_size": 16, "accum_steps": 4},
                350.0, step_peak_bytes=400 * MIB, accumulation_gap=gap,
                snippet_gap=snippet_gap)]


TRIO = {  # claim -> builder(kind): records giving that verdict ({holds, fails, inconclusive})
    "tile_shape": lambda k: tiles_for({"holds": 300.0, "fails": 200.0,
                                       "inconclusive": 240.0}[k], 0.05),
    "tc_peak": lambda k: grid_best({"holds": 97.0, "fails": 85.0, "inconclusive": 90.0}[k],
                                   0.04),
    "unit_util": lambda k: mfu({"holds": 96.0, "fails": 80.0, "inconclusive": 91.0}[k], 0.03),
    "tf32_speed": lambda k: [peak("fp32", 19.0, 19.5, time_ms=spread(0.02)),
                             peak("tf32", 19.0 * {"holds": 8.5, "fails": 7.0,
                                                  "inconclusive": 7.9}[k], 156.0,
                                  time_ms=spread(0.02))],
    "half_speed": lambda k: [peak("tf32", 140.0, 156.0, time_ms=spread(0.02)),
                             peak("bf16", 290.0, 312.0),
                             peak("fp16", 140.0 * {"holds": 2.1, "fails": 1.8,
                                                   "inconclusive": 1.98}[k], 312.0)],
    "fp8_speed": lambda k: [peak("bf16", 700.0, 989.0, time_ms=spread(0.02)),
                            peak("fp8", 700.0 * {"holds": 2.2, "fails": 1.5,
                                                 "inconclusive": 1.97}[k], 1979.0)],
    "sparsity_speed": lambda k: sparse(300.0, 0.02, {"holds": 2.2, "fails": 1.3,
                                                     "inconclusive": 1.98}[k]),
    "sparsity_util": lambda k: sparse(624.0 * {"holds": 0.9, "fails": 0.5,
                                               "inconclusive": 0.84}[k] + 0.0, 0.03),
    "energy": lambda k: power_chain({"holds": 25.0, "fails": 5.0, "inconclusive": 17.0}[k],
                                    0.02),
    "amp_speed": lambda k: pair("resnet50", {"holds": 2.0, "fails": 1.5,
                                             "inconclusive": 1.78}[k], 40.0, 0.02),
    "nlp_speed_memory": lambda k: pair("transformer", {"holds": 3.5, "fails": 2.0,
                                                       "inconclusive": 2.95}[k], 35.0, 0.02),
    "overall": lambda k: pair("transformer", {"holds": 3.5, "fails": 2.0,
                                              "inconclusive": 2.95}[k], 31.0, 0.02),
    "amp_trains": lambda k: amp_trains([2.0, 2.01, 1.99], {
        "holds": [2.0, 2.005, 1.995], "fails": [2.3, 2.31, 2.29],
        "inconclusive": [2.04, 2.05, 2.03]}[k]),
    "tf32_accuracy": lambda k: tf32_runs([2.0, 2.01, 1.99], {
        "holds": [2.0, 2.005, 1.995], "fails": [2.3, 2.31, 2.29],
        "inconclusive": [2.04, 2.05, 2.03]}[k]),
    "embeddings_fp32": lambda k: tables([2.0, 2.02, 1.98], {
        "holds": [2.3, 2.31, 2.29], "fails": [1.95, 1.96, 1.94],
        "inconclusive": [2.04, 2.06, 2.02]}[k]),
    "idle_cut": lambda k: [rung(0, False, False, 0.60, 0.01),
                           rung(4, False, False, {"holds": 0.40, "fails": 0.50,
                                                  "inconclusive": 0.455}[k], 0.01)],
    "placement": lambda k: placement({"holds": 1.2, "fails": 0.8, "inconclusive": 0.98}[k],
                                     0.02),
    "compression": lambda k: ddp_runs({"holds": 3.5, "fails": 2.0, "inconclusive": 2.9}[k],
                                      0.02),
    "hierarchical": lambda k: hier({"holds": 50.0, "fails": 20.0, "inconclusive": 38.0}[k],
                                   2, 0.02),
}
COUNTED = {  # claims counted with no spread: never inconclusive
    "mp_memory": lambda k: pair("resnet50", 2.0, {"holds": 41.0, "fails": 39.0}[k]),
    "buffers_resnet50": lambda k: pair("resnet50", 2.0, {"holds": 45.0, "fails": 30.0}[k]),
    "accum_traffic": lambda k: [ddp("allreduce", "every_micro_batch", 1000.0),
                                ddp("allreduce", "no_sync", 2000.0, **{
                                    "bytes_per_sample": {"holds": 1000.0, "fails": 3000.0}[k]})],
    "accum_frequency": lambda k: [ddp("allreduce", "every_micro_batch", 1000.0),
                                  ddp("allreduce", "no_sync", 2000.0, **{
                                      "allreduce_calls_per_sample": {"holds": 0.03,
                                                                     "fails": 0.2}[k]})],
    "accum_snippet": lambda k: snippet(3e-7, {"holds": 3e-7, "fails": 0.77}[k]),
    "max_batch": lambda k: [rec("max_batch", {"model": "transformer", "precision": "bf16"},
                                256, prediction_error={"holds": 0.08, "fails": -0.12}[k],
                                limit_bytes=8192 * MIB)],
}


SHOWN = {"case_hospital"}  # the customer's figure: its method shown, never judged
SNIPPETS = {"device_snippet"}   # its cases, TensorFlow's run among them: test_report_snippets.py


def test_every_measured_claim_has_its_cases_here():
    assert {c.id for c in REGISTER if c.judge} == set(TRIO) | set(COUNTED) | SHOWN | SNIPPETS


@pytest.mark.parametrize("device", ["cuda:0", "cpu"])
def test_the_hospital_case_shows_its_method_on_the_labs_model_and_judges_nothing(device):
    """G.9.3's 23 ms -> 9 ms is the customer's model: never holds or fails, on any machine;
    the fp32 vs fp16 latency of the lab's Transformer at batch 1 is shown beside, with the
    command that measures the reader's own model."""
    records = [rec("inference", {"model": "transformer", "batch_size": 1, "precision": p},
                   throughput=1000 / ms, time_ms=[ms] * 5) for p, ms in (("fp32", 6.0),
                                                                        ("fp16", 2.0))]
    v = judge(records, device=device)["case_hospital"]
    assert v["status"] == NOT_MEASURABLE and "the customer's" in v["reason"]
    assert "fp32 p50 6 ms, fp16 2 ms (3x" in v["measured"] and "--user-model" in v["measured"]
    assert v["figures"]["fp16_speedup"]["value"] == pytest.approx(3.0)


@pytest.mark.parametrize("kind", ["holds", "fails", "inconclusive"])
@pytest.mark.parametrize("cid", sorted(TRIO))
def test_each_judge_holds_fails_or_is_inconclusive_within_its_noise(cid, kind):
    v = judge(TRIO[cid](kind))[cid]
    assert v["status"] == {"holds": HOLDS, "fails": FAILS, "inconclusive": INCONCLUSIVE}[kind], \
        (cid, v["measured"], v["reason"])
    assert v["measured"] and v["scope"].startswith("on this GPU")
    if kind == "inconclusive":   # what would decide it
        assert "quieter machine" in v["reason"], v["reason"]


@pytest.mark.parametrize("kind", ["holds", "fails"])
@pytest.mark.parametrize("cid", sorted(COUNTED))
def test_counted_figures_hold_or_fail_with_no_spread(cid, kind):
    v = judge(COUNTED[cid](kind))[cid]
    assert v["status"] == (HOLDS if kind == "holds" else FAILS), (cid, v["measured"])
    assert "±" not in v["measured"]


# ---- winners: judged from their confirmation run ------------------------------------------------
@pytest.mark.parametrize("cid, records", [
    ("tc_peak", grid_best(95.0, 0.0, again=88.0)),
    ("tile_shape", tiles_for(300.0, 0.0, again=200.0)),
    ("compression", ddp_runs(3.5, 0.0, again=2.0)),
])
def test_a_winner_re_timed_below_the_figure_does_not_hold(cid, records):
    v = judge(records)[cid]
    assert v["status"] == FAILS, v["measured"]
    assert "timed again" in v["measured"]


def test_a_winner_without_its_confirmation_run_is_not_judged_yet():
    records = [r for r in grid_best(95.0) if r.label != "tiles_confirm"]
    v = judge(records, missing={"tiles_confirm": [{CONFIRM: "tiles"}]})["tc_peak"]
    assert v["status"] == NOT_MEASURED and "run the same command again" in v["reason"]


# ---- the readings beside the literal one -------------------------------------------------------
def readings(v: dict) -> dict:
    return {r["name"]: (r["status"], r["text"]) for r in v["other_readings"]}


def test_the_other_readings_carry_their_own_outcome():
    v = judge(tiles_for(300.0))["tile_shape"]
    beside = readings(v)
    assert v["status"] == HOLDS and beside["by 2.5x"][0] == FAILS       # 3x is not 3.5x
    assert beside["over no tensor cores"][0] == HOLDS                  # 300 / 19 never decides
    idle = readings(judge([rung(0, False, False, 0.60), rung(4, False, False, 0.40)])[
        "idle_cut"])
    assert idle["percentage points"][0] == FAILS                       # 20 points, a 33% cut
    energy = judge(power_chain(10.0))["energy"]
    assert energy["status"] == FAILS and readings(energy)["energy per FLOP"][0] == HOLDS
    assert "fp32 -> mixed precision +5%, then + 2:4 -14%" in energy["measured"]
    share = judge(sparse(560.0))["sparsity_util"]
    assert share["status"] == HOLDS and "89.7% of the sparse peak" in share["measured"]
    comp = judge(ddp_runs(3.5))["compression"]
    assert readings(comp)["no_sync alone"][0] == FAILS == readings(comp)["compression alone"][0]
    figures = {k: f["value"] for k, f in comp["figures"].items()}   # separate figures, each
    assert figures["no_sync_alone"] == pytest.approx(2.0)
    assert figures["compression_alone"] == pytest.approx(1.3)
    assert figures["comm_share_pct"] == pytest.approx(0.0)          # equal step times here
    assert "communication share, estimated" in comp["measured"]


# ---- the rows that tested the wrong thing ------------------------------------------------------
def test_hierarchical_on_one_box_cannot_be_tested_and_shows_the_method():
    v = judge(hier(50.0, hosts=1))["hierarchical"]
    assert v["status"] == UNTESTABLE and "needs ranks on more than one node" in v["reason"]
    assert "on 1 node(s)" in v["measured"] and "cut by 50%" in v["measured"]
    assert judge(hier(50.0, hosts=2))["hierarchical"]["status"] == HOLDS


def test_the_snippet_does_not_give_the_large_batch_and_the_fix_is_beside_it():
    v = judge(snippet(3e-7, 0.77))["accum_snippet"]
    assert v["status"] == FAILS and "gradient gap 0.77" in v["measured"]
    assert readings(v)["the fix"][0] == HOLDS


def test_resnet50_rows_without_resnet50_are_untestable_with_the_transformer_beside():
    why = {c: "ResNet-50 comes from torchvision: torchvision is not installed"
           for c in ("mp_memory", "buffers_resnet50", "amp_speed")}
    v = judge(pair("transformer", 3.0, 45.0), untestable=why)
    for cid in why:
        assert v[cid]["status"] == UNTESTABLE and "torchvision" in v[cid]["reason"]
        assert "the Transformer" in v[cid]["measured"]
        assert readings(v[cid])["the Transformer"][0] == HOLDS


@pytest.mark.parametrize("cid, records", [
    ("amp_trains", amp_trains([None, 2.0, 2.0], [2.0, 2.0, 2.0])),
    ("tf32_accuracy", tf32_runs([None, 2.0, 2.0], [2.0, 2.0, 2.0])),
    ("embeddings_fp32", tables([None, 2.0, 2.0], [2.0, 2.0, 2.0])),
    ("amp_trains", amp_trains([3.9, 3.9, 3.9], [3.9, 3.9, 3.9])),     # never fell: too few steps
    ("embeddings_fp32", tables([3.9, 3.9, 3.9], [3.9, 3.9, 3.9])),
])
def test_a_baseline_that_diverged_or_did_not_train_has_failed(cid, records):
    v = judge(records)[cid]
    assert v["status"] == FAILED and ("diverged" in v["reason"] or "too few steps" in
                                      v["reason"]), v


def test_a_diverged_candidate_does_not_hold_and_fp16_tables_that_diverge_uphold_the_advice():
    assert status(amp_trains([2.0] * 3, [None, 2.0, 2.0]), "amp_trains") == FAILS
    assert status(tf32_runs([2.0] * 3, [None, 2.0, 2.0]), "tf32_accuracy") == FAILS
    assert status(tables([2.0] * 3, [None, 2.0, 2.0]), "embeddings_fp32") == HOLDS


def test_fp16_tables_with_their_state_in_fp16_are_shown_apart():
    v = judge(tables([2.0, 2.02, 1.98], [1.95, 1.96, 1.94], plain=None))["embeddings_fp32"]
    assert v["status"] == FAILS and readings(v)["AdamW's state in fp16"] == (HOLDS,
                                                                            "held-out loss "
                                                                            "diverged")
    assert "rounded away 40%" in v["measured"]


def test_tf32_that_did_not_engage_has_failed():
    v = judge(tf32_runs([2.0] * 3, [2.0] * 3, probe_tf32=2.1e-7))["tf32_accuracy"]
    assert v["status"] == FAILED and "TF32 did not engage" in v["reason"]


def test_compression_that_did_not_compress_or_lost_the_loss_does_not_hold():
    v = judge(ddp_runs(3.5, sent=1.0, compressed=False))["compression"]
    assert v["status"] == FAILS and "did not compress" in v["measured"]
    assert status(ddp_runs(3.5, loss=1.5), "compression") == FAILS


# ---- failures, pending points, the price ---------------------------------------------------------
def test_every_point_out_of_memory_is_failed_and_a_missing_one_pending():
    guide = tile("guide_tiles", 16, 1.0, bn=16, bk=16)
    records = [rec("guide_tiles", guide.params, outcome="oom", message="out of memory at "
                   "4096^3"), tile("tiles", 64, 100.0), tile("guide_tiles_confirm", 64, 100.0)]
    v = judge(records, missing={"guide_tiles_confirm": []})["tile_shape"]
    assert v["status"] == FAILED and "out of memory" in v["reason"]
    v = judge(tiles_for(300.0), missing={"tiles": [{"block_m": 512}]})["tile_shape"]
    assert v["status"] == NOT_MEASURED and "run the same command again" in v["reason"]


def test_a_changed_price_changes_the_cost_figures_and_no_verdict():
    records = pair("resnet50", 2.0, 45.0)
    cheap, dear = judge(records, price=0.5), judge(records, price=20.0)
    assert all(cheap[c]["status"] == dear[c]["status"] for c in CLAIMS)
    key = "amp_speed.resnet50_amp_usd_per_million"
    assert dear["_facts"]["figures"][key]["value"] == pytest.approx(
        40 * cheap["_facts"]["figures"][key]["value"])


# ---- the CPU rule ----------------------------------------------------------------------------
def test_on_a_cpu_no_gpu_claim_or_reading_is_judged_and_counted_ones_are():
    v = {cid: judge(build("holds"), "cpu")[cid] for cid, build in {**TRIO, **COUNTED}.items()}
    for cid, row in v.items():
        if not CLAIMS[cid].cpu_answers:   # max_batch: a CPU's peak is the model's own count
            assert row["status"] == (UNTESTABLE if cid == "max_batch" else METHOD_ON_CPU), cid
            assert all(r["status"] not in JUDGED for r in row["other_readings"]), cid
    assert "tensor cores" in v["tile_shape"]["reason"]
    assert v["accum_traffic"]["status"] == HOLDS and "a CPU answers it" in \
        v["accum_traffic"]["reason"]
    assert v["accum_snippet"]["status"] == HOLDS and "a CPU answers it" in \
        v["accum_snippet"]["reason"]


# ---- health ---------------------------------------------------------------------------------
def test_sibling_check_flags_the_slow_card_and_only_against_the_same_model():
    records = [peak("bf16", 280.0, 312.0), peak("bf16", 282.0, 312.0, "cuda:1", "siblings"),
               peak("bf16", 200.0, 312.0, "cuda:2", "siblings"),
               peak("bf16", 278.0, 312.0, "cuda:3", "siblings", copy_gbs=1000.0),
               peak("bf16", 150.0, 312.0, "cuda:4", "siblings", name="NVIDIA A100-PCIE-40GB")]
    health = judge(records)["_facts"]["health"]
    flagged = {(f["device"], f["metric"], f["against"]) for f in health["flags"]}
    assert ("cuda:2", "matmul_tflops", "siblings") in flagged
    assert ("cuda:3", "copy_gbs", "siblings") in flagged
    assert not any(d in ("cuda:0", "cuda:1") for d, _, _ in flagged)
    assert ("cuda:4", "matmul_tflops", "siblings") not in flagged
    assert [c["device"] for c in health["cards"]] == [f"cuda:{i}" for i in range(5)]


def test_busbw_comes_from_the_flat_all_reduce_of_the_hierarchical_step():
    r = rec("hierarchical", {"op": "all_reduce", "size_bytes": 2**30, "world_size": 8,
                             "backend": "nccl"}, 150.0, algbw_gbs=86.0, link_gbs=200.0)
    h = rec("hierarchical", {"op": "hierarchical_all_reduce", "size_bytes": 2**30,
                             "world_size": 8, "backend": "nccl"}, 120.0)
    facts = judge([r, h])["_facts"]
    assert facts["health"]["busbw"]["rows"][0]["busbw_gbs"] == 150.0
    assert facts["figures"]["busbw.1073741824"]["value"] == 150.0


def test_compression_and_placement_are_judged_on_the_guides_configurations():
    """G.1.9 on the lab's Transformer at its published batch, the communication share and what
    3x would need beside it; G.5.5 on the bytes a split moves and its step time with reused
    buffers, failing when reuse moves more."""
    comp = judge(ddp_runs(3.5))["compression"]
    assert "DDP of transformer (gpt2_small" in comp["measured"]
    assert "3x needs at least" in comp["measured"] or "3x needs more than" in comp["measured"]
    assert "ResNet-50" in [r.name for r in CLAIMS["compression"].readings]
    place = judge(placement(1.2))["placement"]
    assert place["status"] == HOLDS and "24 and 24 MiB cross per step" in place["measured"]
    assert "reused / fresh" in place["figures"]["reused_over_fresh"]["label"]
    more = judge(placement(1.2, reused_bytes=48 * MIB))["placement"]
    assert more["status"] == FAILS and "the reused buffers moved more" in more["measured"]
