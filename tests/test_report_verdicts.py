"""The report's verdicts, health section and figures from synthetic records: each rule at its
threshold, the sibling check's flagging, not-measured and untestable claims."""

from __future__ import annotations

import pytest

from a800lab.core.results import Record
from a800lab.report.battery import Plan, Step
from a800lab.report.claims import FAILS, HOLDS, NOT_MEASURED, UNTESTABLE
from a800lab.report.verdicts import judge_claims, newest_by_step

MIB = 2**20


def rec(step: str, params: dict, throughput: float | None = 1.0, noisy: bool = False,
        outcome: str = "ok", time_ms=(1.0, 1.0, 1.0), message: str = "", **metrics) -> Record:
    return Record(workload=step, params=params, outcome=outcome, message=message,
                  throughput=throughput if outcome == "ok" else None, metrics=metrics,
                  label=step, time_ms=tuple(time_ms), noise={"noisy": noisy})


def gpu_plan(*steps: str, untestable: dict | None = None) -> Plan:
    return Plan("quick", "cuda:0", 2, tuple(Step(s, s, ({},)) for s in steps),
                untestable or {})


def verdicts(records, plan, price: float = 2.0) -> dict:
    facts = judge_claims(records, plan, device_name="NVIDIA A800-SXM4-80GB",
                  price_per_gpu_hour_usd=price)
    return {c["id"]: c for c in facts["claims"]} | {"_facts": facts}


def peak(device: str, precision: str, tflops: float, name="NVIDIA A800-SXM4-80GB",
         step="peak", copy_gbs=1800.0, noisy=False, rel_error=1e-6):
    return rec(step, {"device": device, "precision": precision, "size": 8192}, tflops, noisy,
               card_name=name, datasheet_tflops=312.0, copy_gbs=copy_gbs,
               datasheet_copy_gbs=2039.0, rel_error=rel_error)


def tile(block: int, tflops: float, noisy=False, pct=None):
    return rec("tiles", {"m": 4096, "n": 4096, "k": 4096, "precision": "bf16",
                         "block_m": block}, tflops, noisy, tile_config=f"{block}x{block}",
               pct_of_datasheet_peak=pct, datasheet_peak_tflops=312.0)


@pytest.mark.parametrize("best, claim_status", [(200.0, HOLDS), (190.0, FAILS)])
def test_tile_spread_holds_at_80_percent_of_the_claimed_2_5x(best, claim_status):
    v = verdicts([tile(64, 100.0), tile(128, best, pct=100 * best / 312)],
                 gpu_plan("tiles"))
    assert v["tile_spread"]["status"] == claim_status
    assert v["tile_spread"]["figures"]["ratio"]["value"] == pytest.approx(best / 100)
    assert "on this GPU: NVIDIA A800-SXM4-80GB" in v["tile_spread"]["scope"]
    assert v["_facts"]["figures"]["tile_spread.ratio"]["value"] == pytest.approx(best / 100)


@pytest.mark.parametrize("tflops, status", [(0.80 * 312, HOLDS), (0.79 * 312, FAILS)])
def test_tile_peak_needs_80_percent_of_the_datasheet(tflops, status):
    v = verdicts([tile(128, tflops, pct=100 * tflops / 312), tile(64, 50.0)], gpu_plan("tiles"))
    assert v["tile_peak"]["status"] == status


def test_a_noisy_point_behind_a_verdict_marks_it_noisy():
    v = verdicts([tile(64, 50.0, noisy=True), tile(128, 250.0)], gpu_plan("tiles"))
    assert v["tile_spread"]["noisy"] and "run again before acting" in v["tile_spread"]["measured"]


def test_precision_ratios_and_tf32_accuracy():
    records = [peak("cuda:0", "fp32", 19.0, rel_error=1e-6),
               peak("cuda:0", "tf32", 140.0, rel_error=1e-3),
               peak("cuda:0", "bf16", 280.0), peak("cuda:0", "fp16", 200.0)]
    v = verdicts(records, gpu_plan("peak", untestable={"fp8_speed": "needs sm_89"}))
    assert v["tf32_speed"]["status"] == HOLDS        # 7.4x >= 6.4x
    assert v["half_speed"]["status"] == FAILS        # fp16 200/140 = 1.43x < 1.6x
    assert v["half_speed"]["figures"]["fp16_over_tf32"]["value"] == pytest.approx(200 / 140)
    assert v["tf32_accuracy"]["status"] == FAILS     # 1000x fp32's error
    assert v["fp8_speed"]["status"] == UNTESTABLE and v["fp8_speed"]["reason"] == "needs sm_89"


def test_sibling_check_flags_the_slow_card_and_only_against_the_same_model():
    records = [peak("cuda:0", "bf16", 280.0), peak("cuda:1", "bf16", 282.0, step="siblings"),
               peak("cuda:2", "bf16", 200.0, step="siblings"),
               peak("cuda:3", "bf16", 278.0, step="siblings", copy_gbs=1000.0),
               peak("cuda:4", "bf16", 150.0, step="siblings", name="NVIDIA A100-PCIE-40GB")]
    health = verdicts(records, gpu_plan("peak", "siblings"))["_facts"]["health"]
    flagged = {(f["device"], f["metric"], f["against"]) for f in health["flags"]}
    assert ("cuda:2", "matmul_tflops", "siblings") in flagged
    assert ("cuda:3", "copy_gbs", "siblings") in flagged
    assert not any(d in ("cuda:0", "cuda:1") for d, _, _ in flagged)
    assert ("cuda:4", "matmul_tflops", "siblings") not in flagged   # no sibling of its model
    assert "29% below the median" in next(f["message"] for f in health["flags"]
                                         if f["device"] == "cuda:2")
    assert [c["device"] for c in health["cards"]] == [f"cuda:{i}" for i in range(5)]


def test_the_main_card_is_compared_in_the_siblings_precision():
    records = [peak("cuda:0", "fp32", 19.0), peak("cuda:0", "bf16", 280.0),
               peak("cuda:1", "bf16", 281.0, step="siblings")]
    health = verdicts(records, gpu_plan("peak", "siblings"))["_facts"]["health"]
    assert [(c["device"], c["precision"]) for c in health["cards"]] == [
        ("cuda:0", "bf16"), ("cuda:1", "bf16")]
    assert health["flags"] == []


def train(model: str, precision: str, rate: float, peak_mib: float):
    return rec("train", {"model": model, "size": "medium", "precision": precision}, rate,
               step_peak_bytes=int(peak_mib * MIB))


def test_mixed_precision_memory_and_speed_must_hold_on_every_preset():
    records = [train("mlp", "fp32", 100, 1000), train("mlp", "bf16", 250, 500),
               train("transformer", "fp32", 100, 1000), train("transformer", "bf16", 140, 800)]
    v = verdicts(records, gpu_plan("train"))
    assert v["mp_memory"]["status"] == FAILS          # transformer saves 20% < 32%
    assert v["mp_memory"]["figures"]["mlp_saving_pct"]["value"] == pytest.approx(50)
    assert v["mp_speed"]["status"] == FAILS           # transformer 1.4x < 1.44x
    v = verdicts(records[:2], gpu_plan("train"))
    assert v["mp_memory"]["status"] == HOLDS and v["mp_speed"]["status"] == HOLDS


def accum(model: str, batch: int, steps: int, rate: float, peak_mib: float, gap=None):
    extra = {} if gap is None else {"accumulation_gap": gap}
    return rec("accumulation", {"model": model, "size": "medium", "batch_size": batch,
                                "accum_steps": steps}, rate,
               step_peak_bytes=int(peak_mib * MIB), **extra)


@pytest.mark.parametrize("gap, micro_mib, status", [
    (1e-7, 400, HOLDS), (1e-2, 400, FAILS), (1e-7, 1200, FAILS)])
def test_accumulation_needs_the_same_gradient_and_less_memory(gap, micro_mib, status):
    v = verdicts([accum("mlp", 64, 1, 1000, 1000), accum("mlp", 16, 4, 800, micro_mib, gap)],
                 gpu_plan("accumulation"))
    assert v["accumulation"]["status"] == status
    assert v["accumulation"]["figures"]["mlp_throughput_share"]["value"] == pytest.approx(0.8)


def test_max_batch_holds_within_10_percent_on_a_gpu():
    records = [rec("max_batch", {"model": "mlp", "size": "medium", "precision": p}, batch,
                   prediction_error=err, limit_bytes=8 * 2**30)
               for p, batch, err in (("fp32", 512, 0.04), ("bf16", 900, -0.12))]
    v = verdicts(records, gpu_plan("max_batch"))
    assert v["max_batch"]["status"] == FAILS and "-12.0%" in v["max_batch"]["measured"]
    assert verdicts(records[:1], gpu_plan("max_batch"))["max_batch"]["status"] == HOLDS


def test_pipeline_overlap_compression_and_the_bill():
    pipe = [rec("pipeline", {"num_workers": 0}, 100, idle_fraction=0.6),
            rec("pipeline", {"num_workers": 4}, 180, idle_fraction=0.2)]
    comm = [rec("compression", {"hook": h, "sync": s, "accum_steps": 4}, 10.0,
                time_ms=(ms,) * 3, syncs_per_step=4 if s == "every_micro_batch" else 1,
                eval_loss=loss)
            for h, s, ms, loss in (("allreduce", "every_micro_batch", 40.0, 1.0),
                                   ("allreduce", "no_sync", 10.0, 1.0),
                                   ("powersgd", "every_micro_batch", 16.0, 1.2),
                                   ("powersgd", "no_sync", 10.0, 1.2))]
    usage = [rec("usage", {"precision": "fp32"}, 1000.0, j_per_sample=0.5,
                 energy_source="nvml energy counter"),
             rec("usage", {"precision": "bf16"}, 1500.0, j_per_sample=0.3,
                 energy_source="nvml energy counter")]
    v = verdicts(pipe + comm + usage, gpu_plan("pipeline", "compression", "usage"), price=3.6)
    assert v["pipeline_overlap"]["status"] == HOLDS           # 0.6 -> 0.2: 67% cut
    assert v["compression"]["status"] == HOLDS                # 10 ms vs 2 ms per sync: 5x
    assert v["compression"]["figures"]["speedup"]["value"] == pytest.approx(5.0)
    assert v["bill"]["status"] == FAILS                       # 1.5x < 1.6x
    assert v["bill"]["figures"]["fp32_usd_per_million"]["value"] == pytest.approx(1.0)
    assert "0.5 J" in v["bill"]["measured"]


def test_unmeasured_and_failed_steps_say_why():
    plan = Plan("quick", "cuda:0", 1, (
        Step("tiles", "tiles", ({}, {}), claims=("tile_spread", "tile_peak")),
        Step("train", "train", ({},), claims=("mp_memory", "mp_speed"))), {})
    v = verdicts([tile(64, 100.0)], plan)
    assert v["tile_spread"]["status"] == NOT_MEASURED
    assert "1 of the 2 point(s) of step 'tiles' measured" in v["tile_spread"]["reason"]
    failed = rec("train", {"model": "mlp", "precision": "fp32"}, outcome="oom",
                 message="CUDA out of memory")
    v = verdicts([failed], plan)
    assert v["mp_memory"]["status"] == NOT_MEASURED
    assert "oom: CUDA out of memory" in v["mp_memory"]["reason"]
    assert v["compression"]["reason"] == "no step of this battery measures it"


def test_the_newest_record_of_a_point_counts():
    older, newer = tile(64, 10.0), tile(64, 20.0)
    steps = newest_by_step([older, newer])
    assert [r.throughput for r in steps["tiles"]] == [20.0]
