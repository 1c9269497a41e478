"""The report's verdict functions on synthetic GPU records: each rule at its figure, within and
beyond its noise, and the edge cases (TF32 not engaged, zero exposed communication, every point
out of memory, PowerSGD that did not compress, a changed price); the health section. The same
functions on records this machine really measured are in test_report_cpu_records.py."""

from __future__ import annotations

import pytest

from a800lab.core.results import Record
from a800lab.report.battery import Plan, Step
from a800lab.report.claims import (
    FAILED,
    FAILS,
    HOLDS,
    METHOD_ON_CPU,
    NOT_MEASURABLE,
    NOT_MEASURED,
    UNTESTABLE,
)
from a800lab.report.register import CLAIMS, REGISTER
from a800lab.report.verdicts import judge_claims
from a800lab.workloads.training.mfu import mfu_figures

MIB = 2**20
A800 = "NVIDIA A800-SXM4-80GB"
STEADY = (10.0, 10.0, 10.0, 10.0, 10.0)


def rec(step: str, params: dict, throughput: float | None = 1.0, noisy: bool = False,
        outcome: str = "ok", time_ms=STEADY, message: str = "", memory=None,
        **metrics) -> Record:
    return Record(workload=step, params=params, outcome=outcome, message=message,
                  throughput=throughput if outcome == "ok" else None, metrics=metrics,
                  label=step, time_ms=tuple(time_ms), noise={"noisy": noisy},
                  memory=memory or {})


def plan(*steps: tuple, untestable: dict | None = None, device: str = "cuda:0") -> Plan:
    """steps: (name, claims[, n points]); without n, the step plans as many points as the
    judged records hold (see `judge`)."""
    return Plan("quick", device, 2, tuple(
        Step(n, n, tuple({"i": i} for i in range(rest[0])) if rest else (), claims=tuple(c))
        for n, c, *rest in steps), untestable or {})


def judge(records, p: Plan, price: float = 2.0) -> dict:
    """judge_claims on `records`; a step of `p` planned without points gets one per record."""
    steps = tuple(s if s.points else Step(s.name, s.workload, tuple(
        {"i": i} for i in range(max(1, sum(r.label == s.name for r in records)))),
        claims=s.claims) for s in p.steps)
    p = Plan(p.mode, p.device, p.gpu_count, steps, p.untestable)
    facts = judge_claims(records, p, device_name=A800, price_per_gpu_hour_usd=price)
    return {c["id"]: c for c in facts["claims"]} | {"_facts": facts}


def spread(rel: float):
    """Time samples whose half-IQR is `rel` of their median (median 10 ms)."""
    d = 10 * rel
    return (10 - d, 10 - d, 10, 10 + d, 10 + d)


# ---- the register's rows -----------------------------------------------------------------------
def test_every_register_entry_gets_a_row_and_unmeasurable_ones_say_why():
    v = judge([], plan())
    assert [k for k in v if k != "_facts"] == [c.id for c in REGISTER]
    for claim in REGISTER:
        row = v[claim.id]
        assert row["stated"] == claim.stated and row["reading"] == claim.reading
        if claim.not_measurable:
            assert row["status"] == NOT_MEASURABLE and row["reason"] == claim.not_measurable
        else:
            assert row["status"] == NOT_MEASURED
            assert "no step of this battery measures it" in row["reason"]


# ---- tiles --------------------------------------------------------------------------------------
def guide(bm: int, bn: int, tflops: float, time_ms=STEADY, outcome="ok"):
    return rec("guide_tiles", {"m": 4096, "n": 4096, "k": 4096, "precision": "bf16",
                               "backend": "triton", "block_m": bm, "block_n": bn, "block_k": 16},
               tflops, time_ms=time_ms, outcome=outcome,
               message="out of memory at 4096^3" if outcome == "oom" else "")


def cublas(precision: str, tflops: float, pct=None):
    return rec("guide_tiles", {"m": 4096, "n": 4096, "k": 4096, "precision": precision,
                               "backend": "torch"}, tflops, pct_of_datasheet_peak=pct)


def grid_tile(block: int, tflops: float, pct: float | None, time_ms=STEADY, stages=3):
    return rec("tiles", {"m": 4096, "n": 4096, "k": 4096, "precision": "bf16",
                         "backend": "triton", "block_m": block, "block_n": block, "block_k": 64,
                         "num_stages": stages}, tflops, time_ms=time_ms,
               pct_of_datasheet_peak=pct, datasheet_peak_tflops=312.0)


TILES = plan(("guide_tiles", ("tile_shape", "tc_peak")), ("tiles", ("tc_peak",)))


@pytest.mark.parametrize("fp32, rel, status", [(19.0, 0.0, HOLDS), (60.0, 0.0, FAILS),
                                               (52.0, 0.05, HOLDS), (52.0, 0.0, FAILS)])
def test_the_guides_tile_over_fp32_within_its_noise(fp32, rel, status):
    # 120 / 52 = 2.31x: short of 2.5x, but reaches it with a 5% spread on each side
    records = [guide(16, 16, 80.0), guide(32, 16, 120.0, spread(rel)),
               rec("guide_tiles", {"m": 4096, "n": 4096, "k": 4096, "precision": "fp32",
                                   "backend": "torch"}, fp32, time_ms=spread(rel)),
               cublas("bf16", 280.0), grid_tile(128, 260.0, 83.3)]
    v = judge(records, TILES)["tile_shape"]
    assert v["status"] == status
    assert v["figures"]["ratio"]["value"] == pytest.approx(120.0 / fp32)
    assert "32x8's nearest" in v["measured"] and "IEEE fp32 cuBLAS" in v["measured"]
    assert v["figures"]["best_over_guide"]["value"] == pytest.approx(260 / 120)
    assert v["figures"]["cublas_over_guide"]["value"] == pytest.approx(280 / 120)


def test_every_guide_tile_out_of_memory_is_a_failure_not_a_pending_point():
    records = [guide(16, 16, 0, outcome="oom"), guide(32, 16, 0, outcome="oom"),
               cublas("fp32", 19.0), cublas("bf16", 280.0)]
    v = judge(records, TILES)["tile_shape"]
    assert v["status"] == FAILED
    assert "out of memory" in v["reason"] and "running again gives the same" in v["reason"]
    four = plan(("guide_tiles", ("tile_shape",), 4), ("tiles", ("tc_peak",)))
    v = judge(records[:3], four)["tile_shape"]   # one point not measured yet: resume
    assert v["status"] == NOT_MEASURED and "run the same command again" in v["reason"]


@pytest.mark.parametrize("pct, rel, status", [(92.5, 0.0, HOLDS), (89.0, 0.04, HOLDS),
                                              (89.0, 0.0, FAILS)])
def test_92_percent_of_peak_is_judged_at_92_within_noise(pct, rel, status):
    records = [grid_tile(64, 200.0, 64.0), grid_tile(128, pct * 3.12, pct, spread(rel)),
               cublas("bf16", 290.0, pct=93.0)]
    v = judge(records, TILES)["tc_peak"]
    assert v["status"] == status
    assert "cuBLAS at the same shape 93.0%" in v["measured"] and "num_stages 3" in v["measured"]


# ---- peaks, precisions, sparsity ------------------------------------------------------------
def peak(precision: str, tflops: float, datasheet: float, device="cuda:0", step="peak",
         name=A800, copy_gbs=1800.0, time_ms=STEADY):
    return rec(step, {"device": device, "precision": precision, "size": 8192}, tflops,
               time_ms=time_ms, card_name=name, datasheet_tflops=datasheet,
               ratio_of_datasheet=tflops / datasheet, copy_gbs=copy_gbs,
               datasheet_copy_gbs=2039.0)


PEAKS = plan(("peak", ("tf32_speed", "half_speed", "fp8_speed", "unit_util", "health")),
             untestable={"fp8_speed": "fp8 needs compute capability >= 8.9"})


def test_unit_utilisation_needs_both_fp16_and_fp32_at_92_percent():
    records = [peak("fp32", 18.2, 19.5), peak("fp16", 290.0, 312.0)]
    assert judge(records, PEAKS)["unit_util"]["status"] == HOLDS      # 93.3% and 92.9%
    records = [peak("fp32", 18.2, 19.5), peak("fp16", 270.0, 312.0)]
    v = judge(records, PEAKS)["unit_util"]
    assert v["status"] == FAILS and v["figures"]["fp16_pct"]["value"] == pytest.approx(86.5, 0.01)


def test_datasheet_ratios_are_judged_at_the_datasheet_figure():
    records = [peak("fp32", 19.0, 19.5), peak("tf32", 140.0, 156.0),
               peak("bf16", 285.0, 312.0), peak("fp16", 290.0, 312.0)]
    v = judge(records, PEAKS)
    assert v["tf32_speed"]["status"] == FAILS        # 7.4x < 8x, no noise to close the gap
    assert v["half_speed"]["status"] == HOLDS        # 2.04x and 2.07x
    assert v["fp8_speed"]["status"] == UNTESTABLE and "8.9" in v["fp8_speed"]["reason"]


def test_sparsity_utilisation_past_85_percent_holds_and_speed_needs_2x():
    records = [peak("fp16", 280.0, 312.0),
               rec("sparsity", {"m": 8192, "n": 8192, "k": 8192, "precision": "fp16"}, 300.0,
                   speedup=1.3)]
    p = plan(("peak", ("health",)), ("sparsity", ("sparsity_util", "sparsity_speed")))
    v = judge(records, p)
    assert v["sparsity_util"]["status"] == HOLDS
    assert "48.1% of the sparse peak" in v["sparsity_util"]["measured"]
    assert v["sparsity_speed"]["status"] == FAILS


# ---- energy -------------------------------------------------------------------------------------
def usage(step: str, precision: str, j_per_tflop, power_w=400.0, time_ms=STEADY):
    return rec(step, {"size": 8192, "precision": precision}, 10.0, time_ms=time_ms,
               j_per_tflop=j_per_tflop, power_w=power_w, energy_source="energy_counter",
               energy_note="NVML's total-energy counter", cpu_s_per_tflop=0.01)


ENERGY = plan(("energy", ("energy",)), ("energy_sparse", ("energy",)))


def test_energy_per_tflop_cut_and_above_the_claimed_range():
    records = [usage("energy", "fp32", 20.0), usage("energy", "fp16", 1.4),
               usage("energy_sparse", "fp16", 0.9, power_w=410.0)]
    v = judge(records, ENERGY)["energy"]
    assert v["status"] == HOLDS
    assert v["figures"]["energy_cut_pct"]["value"] == pytest.approx(95.5)
    assert "above the claimed range 18-22%" in v["measured"]
    assert "400 W (fp32) -> 410 W" in v["measured"]            # the literal power, beside


def test_energy_short_of_18_percent_fails_and_no_reading_has_failed():
    records = [usage("energy", "fp32", 1.0), usage("energy_sparse", "fp16", 0.9)]
    assert judge(records, ENERGY)["energy"]["status"] == FAILS          # 10% < 18%
    records = [usage("energy", "fp32", None), usage("energy_sparse", "fp16", None)]
    v = judge(records, ENERGY)["energy"]
    assert v["status"] == FAILED and "no energy reading" in v["reason"]
    assert judge(records[:1], plan(("energy", ("energy",)), ("energy_sparse", ("energy",), 1)))[
        "energy"]["status"] == NOT_MEASURED


# ---- mixed precision -------------------------------------------------------------------------
def amp(model: str, precision: str, rate: float, peak_mib: float, act_mib=100.0,
        loss=1.0, time_ms=STEADY, skipped=0):
    size = "224" if model == "resnet50" else "gpt2_small"
    return rec("amp", {"model": model, "size": size, "batch_size": 8, "precision": precision},
               rate, time_ms=time_ms, step_peak_bytes=int(peak_mib * MIB),
               activation_bytes=int(act_mib * MIB), eval_loss=loss, skipped_steps=skipped,
               loss_curve=[loss] * 10, scale=65536.0)


AMP = plan(("amp", ("mp_memory", "buffers_resnet50", "amp_speed", "nlp_speed_memory",
                    "overall", "amp_trains")))


def test_amp_speed_from_the_ranges_low_end_against_the_frameworks_default_fp32():
    records = [amp("resnet50", "fp32_default", 1000, 20000),
               amp("resnet50", "fp16", 1750, 11000, time_ms=spread(0.03)),
               amp("resnet50", "tf32", 1300, 20000),
               amp("transformer", "fp32_default", 50, 30000),
               amp("transformer", "fp16", 160, 17000)]
    v = judge(records, AMP)
    # ResNet-50's 1.75x misses 1.8x alone and reaches it within its 3% spread (1.80)
    assert v["amp_speed"]["status"] == HOLDS
    assert "ResNet-50 (224): fp32 1000, AMP 1750" in v["amp_speed"]["measured"]
    assert "against TF32 (1300)" in v["amp_speed"]["measured"]
    assert "above the claimed range 1.8-2.5x" in v["amp_speed"]["measured"]   # 3.2x transformer
    assert v["mp_memory"]["status"] == HOLDS             # 45% and 43% saved
    assert v["nlp_speed_memory"]["status"] == HOLDS      # 3.2x, -43%
    assert v["overall"]["status"] == FAILS               # ResNet-50 1.75x is not 3x
    records[1] = amp("resnet50", "fp16", 1700, 11000)
    assert judge(records, AMP)["amp_speed"]["status"] == FAILS


def test_a_changed_price_changes_the_cost_figures_and_no_verdict():
    records = [amp("transformer", "fp32_default", 50, 30000),
               amp("transformer", "fp16", 160, 17000)]
    cheap, dear = judge(records, AMP, price=0.5), judge(records, AMP, price=20.0)
    for cid in CLAIMS:
        assert cheap[cid]["status"] == dear[cid]["status"]
    key = "amp_speed.transformer_amp_usd_per_million"
    assert dear["_facts"]["figures"][key]["value"] == pytest.approx(
        40 * cheap["_facts"]["figures"][key]["value"])
    assert "at $20 per GPU-hour" in dear["amp_speed"]["measured"]


def test_resnet50s_buffers_and_a_model_that_ran_out_of_memory():
    records = [amp("resnet50", "fp32_default", 1000, 20000, act_mib=9000),
               amp("resnet50", "fp16", 1800, 12000, act_mib=4900)]
    v = judge(records, AMP)
    assert v["buffers_resnet50"]["status"] == HOLDS      # 45.6% fewer activation bytes
    oom = [rec("amp", {"model": "resnet50", "size": "224", "batch_size": 64, "precision": p},
               outcome="oom", message="CUDA out of memory") for p in ("fp32_default", "fp16")]
    v = judge(oom + [rec("amp", {"i": i}, outcome="oom") for i in range(4)], AMP)
    assert v["buffers_resnet50"]["status"] == FAILED and "out of memory" in \
        v["buffers_resnet50"]["reason"]


def test_amp_trains_like_fp32_only_if_it_reaches_fp32s_loss():
    ok = [amp("transformer", "fp32_default", 50, 30000, loss=2.00),
          amp("transformer", "fp16", 160, 17000, loss=2.03, skipped=2)]
    v = judge(ok, AMP)["amp_trains"]
    assert v["status"] == HOLDS and "skipped 2 step(s)" in v["measured"]
    diverged = [ok[0], amp("transformer", "fp16", 160, 17000, loss=None)]
    v = judge(diverged, AMP)["amp_trains"]
    assert v["status"] == FAILS and "AMP diverged" in v["measured"]


def mfu_step(model: str, precision: str, rate: float, gflop_per_sample: float,
             datasheet: float | None, time_ms=STEADY):
    """An amp record carrying MFU as train_point computes it (mfu_figures)."""
    size = "224" if model == "resnet50" else "gpt2_small"
    core = "fp16" if precision == "fp16" else "fp32"
    metrics = mfu_figures(gflop_per_sample * 1e9, rate, {
        "peak_precision": core, "datasheet_peak_tflops": datasheet,
        "datasheet_peak_source": "test", "measured_peak_tflops": None})
    return rec("amp", {"model": model, "size": size, "batch_size": 8, "precision": precision},
               rate, time_ms=time_ms, step_peak_bytes=MIB, **metrics)


MFU = plan(("amp", ("unit_util_mfu",)), ("peak", ("unit_util_mfu",)))


def test_the_best_amp_steps_mfu_is_judged_at_92_percent_within_noise():
    resnet = mfu_step("resnet50", "fp16", 3000, 24.6, 312.0)           # 73.8 TFLOP/s, 23.7%
    records = [resnet, mfu_step("resnet50", "fp32_default", 900, 24.6, 19.5),
               mfu_step("transformer", "fp16", 100, 2600, 312.0),      # 260 TFLOP/s, 83.3%
               peak("fp16", 290.0, 312.0)]
    v = judge(records, MFU)["unit_util_mfu"]
    assert v["status"] == FAILS
    assert v["figures"]["mfu_pct"]["value"] == pytest.approx(100 * 260 / 312)
    assert "best: Transformer (gpt2_small) AMP at 83.3% MFU" in v["measured"]
    assert "2.6e+03 GFLOP per sample x 100 samples/s = 260 TFLOP/s" in v["measured"]
    assert "89.7% of the fp16 matmul rate measured here, 290" in v["measured"]   # 260 / 290
    assert "40-60% MFU is good" in v["measured"]
    records[2] = mfu_step("transformer", "fp16", 110, 2600, 312.0, time_ms=spread(0.03))
    v = judge(records, MFU)["unit_util_mfu"]      # 91.7% reaches 92% within its 3% spread
    assert v["status"] == HOLDS and v["figures"]["mfu_pct"]["value"] < 92


def test_mfu_without_a_datasheet_peak_is_untestable_on_a_gpu_and_a_method_on_a_cpu():
    records = [mfu_step("transformer", "fp16", 100, 2600, None), peak("fp32", 18.0, 19.5)]
    v = judge(records, MFU)["unit_util_mfu"]
    assert v["status"] == UNTESTABLE and "no fp16 datasheet peak" in v["reason"]
    cpu = plan(("amp", ("unit_util_mfu",)), ("peak", ("unit_util_mfu",)), device="cpu")
    records = [mfu_step("transformer", "fp32_default", 40, 0.05, None),
               mfu_step("transformer", "fp16", 4, 0.05, None),
               peak("fp32", 0.1, 1.0, device="cpu")]
    v = judge(records, cpu)["unit_util_mfu"]
    assert v["status"] == METHOD_ON_CPU and "MFU needs a GPU" in v["measured"]
    assert "fp32_default: 0.05 GFLOP per sample x 40 samples/s = 0.002 TFLOP/s (2.0% of the " \
        "fp32 matmul rate measured here" in v["measured"]


# ---- TF32's held-out loss ----------------------------------------------------------------------
def held(precision: str, loss, probe: float, seed: int):
    return rec("tf32_loss", {"precision": precision, "model": "transformer", "size": "medium",
                             "seed": seed}, 100.0, eval_loss=loss, matmul_probe_error=probe,
               steps_trained=100)


TF32 = plan(("tf32_loss", ("tf32_accuracy",)))


def test_tf32_accuracy_is_the_held_out_loss_within_the_seeds_spread():
    records = [held("fp32", 1.50, 2e-7, 0), held("fp32", 1.52, 2e-7, 1),
               held("tf32", 1.515, 3e-4, 0), held("tf32", 1.53, 3e-4, 1)]
    v = judge(records, TF32)["tf32_accuracy"]
    assert v["status"] == HOLDS and "TF32 engaged" in v["measured"]
    records[2:] = [held("tf32", 1.60, 3e-4, 0), held("tf32", 1.61, 3e-4, 1)]
    assert judge(records, TF32)["tf32_accuracy"]["status"] == FAILS


def test_tf32_that_did_not_engage_has_failed_and_says_so():
    records = [held("fp32", 1.50, 2e-7, 0), held("fp32", 1.52, 2e-7, 1),
               held("tf32", 1.50, 2e-7, 0), held("tf32", 1.52, 2.1e-7, 1)]
    v = judge(records, TF32)["tf32_accuracy"]
    assert v["status"] == FAILED and "TF32 did not engage" in v["reason"]


# ---- embeddings, accumulation, max batch ------------------------------------------------------
def emb(embedding: str, optimizer: str, loss, seed=0, lost=0.0):
    return rec("embeddings", {"embedding": embedding, "optimizer": optimizer, "seed": seed,
                              "model": "transformer", "size": "medium"}, 100.0, eval_loss=loss,
               lost_update_share=lost)


EMB = plan(("embeddings", ("embeddings_fp32",)))


def test_fp16_embedding_tables_that_diverge_or_lose_loss_uphold_the_advice():
    base = [emb("fp32", "adamw", 1.00, 0), emb("fp32", "adamw", 1.02, 1),
            emb("fp32", "sgd", 2.0), emb("fp16", "sgd", 2.01, lost=0.93)]
    v = judge(base + [emb("fp16", "adamw", None, 0), emb("fp16", "adamw", None, 1)], EMB)
    assert v["embeddings_fp32"]["status"] == HOLDS
    assert "diverged" in v["embeddings_fp32"]["measured"] and "93%" in v["embeddings_fp32"][
        "measured"]
    v = judge(base + [emb("fp16", "adamw", 1.01, 0), emb("fp16", "adamw", 1.015, 1)], EMB)
    assert v["embeddings_fp32"]["status"] == FAILS       # within the seeds' spread


def test_accumulation_matches_the_large_batch_and_the_snippet_does_not():
    p = plan(("accumulation", ("accum_snippet",)))
    big = rec("accumulation", {"model": "transformer", "batch_size": 64, "accum_steps": 1},
              400.0, step_peak_bytes=1000 * MIB)
    small = rec("accumulation", {"model": "transformer", "batch_size": 16, "accum_steps": 4},
                350.0, step_peak_bytes=400 * MIB, accumulation_gap=3e-7, snippet_gap=0.77)
    v = judge([big, small], p)["accum_snippet"]
    assert v["status"] == HOLDS and "snippet as written: gap 0.77" in v["measured"]
    bad = rec("accumulation", {"model": "transformer", "batch_size": 16, "accum_steps": 4},
              350.0, step_peak_bytes=400 * MIB, accumulation_gap=2e-2, snippet_gap=0.77)
    assert judge([big, bad], p)["accum_snippet"]["status"] == FAILS


@pytest.mark.parametrize("error, status", [(0.08, HOLDS), (-0.12, FAILS)])
def test_the_memory_model_within_10_percent(error, status):
    p = plan(("max_batch", ("max_batch",)))
    r = rec("max_batch", {"model": "transformer", "precision": "bf16"}, 256,
            prediction_error=error, limit_bytes=8192 * MIB)
    assert judge([r], p)["max_batch"]["status"] == status


# ---- loading, placement ------------------------------------------------------------------------
def rung(workers: int, pin: bool, nb: bool, idle: float, time_ms=STEADY):
    return rec("pipeline", {"num_workers": workers, "pin_memory": pin, "non_blocking": nb},
               1000.0, time_ms=time_ms, idle_fraction=idle)


PIPE = plan(("pipeline", ("idle_cut",)))


def test_the_idle_cut_is_relative_and_judged_on_the_workers_alone():
    records = [rung(0, False, False, 0.60), rung(4, False, False, 0.42),
               rung(4, True, False, 0.30), rung(4, True, True, 0.28)]
    v = judge(records, PIPE)["idle_cut"]
    assert v["status"] == HOLDS                              # 1 - 0.42 / 0.60 = 30%
    assert v["figures"]["workers_cut_pct"]["value"] == pytest.approx(30.0)
    assert "+ pin_memory: idle 30% (its own cut 29%)" in v["measured"]
    assert "all levers together: 53%" in v["measured"]
    records[1] = rung(4, False, False, 0.48)                 # 20% < 25%
    assert judge(records, PIPE)["idle_cut"]["status"] == FAILS


def test_no_idle_time_to_cut_is_untestable_not_a_failure():
    v = judge([rung(0, False, False, 0.0), rung(4, False, False, 0.0)], PIPE)["idle_cut"]
    assert v["status"] == UNTESTABLE and "no idle time to cut" in v["reason"]


def test_placement_holds_when_the_split_is_as_fast():
    p = plan(("placement", ("placement",)))
    whole = rec("placement", {"placement": "all_on_device", "num_rows": 10**7, "dim": 128},
                9000.0, memory={"peak_allocated_bytes": 6000 * MIB}, table_bytes=5120 * MIB)
    split = rec("placement", {"placement": "embedding_on_cpu", "num_rows": 10**7, "dim": 128},
                9100.0, memory={"peak_allocated_bytes": 900 * MIB}, crossing_bytes_per_step=4 * MIB)
    v = judge([whole, split], p)["placement"]
    assert v["status"] == HOLDS and "6000 MiB device peak" in v["measured"]
    assert "a 5120 MiB embedding table" in v["measured"]


# ---- communication -----------------------------------------------------------------------------
def ddp(hook: str, sync: str, rate: float, loss=1.0, sent=1.0, step_ms=10.0, compressed=None,
        calls=None, bytes_=None):
    metrics = {"eval_loss": loss, "sent_vs_fp32": sent, "syncs_per_step": 4 if sync ==
               "every_micro_batch" else 1,
               "bytes_per_sample": bytes_ if bytes_ is not None else 1000.0 * sent,
               "allreduce_calls_per_sample": calls if calls is not None else 0.1}
    if compressed is not None:
        metrics["compressed"] = compressed
    return rec("ddp", {"hook": hook, "sync": sync, "accum_steps": 4, "world_size": 8,
                       "backend": "nccl"}, rate, time_ms=(step_ms,) * 5, **metrics)


DDP = plan(("ddp", ("compression", "accum_traffic", "accum_frequency")))


def test_compression_is_a_step_speed_up_with_the_loss_and_bytes_checked():
    records = [ddp("allreduce", "every_micro_batch", 1000, step_ms=40),
               ddp("allreduce", "no_sync", 2500, step_ms=16),
               ddp("fp16_compress", "no_sync", 3100, sent=0.5, loss=1.01, step_ms=13),
               ddp("powersgd", "no_sync", 4000, sent=1.0, compressed=False, step_ms=10)]
    v = judge(records, DDP)["compression"]
    assert v["status"] == HOLDS and "best: fp16_compress" in v["measured"]
    assert "powersgd + no_sync 4x (sent 1 of fp32's bytes per sync); did not compress" in \
        v["measured"]
    assert v["figures"]["speedup"]["value"] == pytest.approx(3.1)
    records[2] = ddp("fp16_compress", "no_sync", 3100, sent=0.5, loss=1.2)
    v = judge(records, DDP)["compression"]
    assert v["status"] == FAILS and "no compressing hook passed" in v["measured"]


def test_zero_exposed_communication_gives_finite_figures_and_no_clipping():
    records = [ddp("allreduce", "every_micro_batch", 1000, step_ms=10),
               ddp("allreduce", "no_sync", 1000, step_ms=10),
               ddp("fp16_compress", "no_sync", 1000, sent=0.5, step_ms=10)]
    v = judge(records, DDP)["compression"]
    assert v["status"] == FAILS and "inf" not in v["measured"]
    assert "+0 ms per step" in v["measured"] and v["figures"]["speedup"]["value"] == 1.0


def test_accumulation_traffic_and_frequency_are_counted():
    records = [ddp("allreduce", "every_micro_batch", 1000, calls=0.125, bytes_=4000.0),
               ddp("allreduce", "no_sync", 1500, calls=0.03125, bytes_=1000.0)]
    v = judge(records, DDP)
    assert v["accum_traffic"]["status"] == HOLDS
    assert v["accum_traffic"]["figures"]["traffic_cut_pct"]["value"] == pytest.approx(75.0)
    assert v["accum_frequency"]["status"] == HOLDS


def test_hierarchical_all_reduce_cut_at_the_largest_message():
    p = plan(("hierarchical", ("hierarchical",)))

    def coll(op: str, size: int, ms: float):
        return rec("hierarchical", {"op": op, "size_bytes": size, "world_size": 8,
                                    "backend": "nccl", "ranks_per_node": 4}, 100.0,
                   time_ms=(ms,) * 5)
    records = [coll("all_reduce", 2**24, 0.5), coll("all_reduce", 2**30, 12.0),
               coll("hierarchical_all_reduce", 2**24, 0.6),
               coll("hierarchical_all_reduce", 2**30, 9.0)]
    v = judge(records, p)["hierarchical"]
    assert v["status"] == FAILS and v["figures"]["cut_pct"]["value"] == pytest.approx(25.0)
    assert "16 MiB flat" in v["measured"]
    records[3] = coll("hierarchical_all_reduce", 2**30, 7.0)
    assert judge(records, p)["hierarchical"]["status"] == HOLDS


# ---- the CPU rule -----------------------------------------------------------------------------
def test_on_a_cpu_gpu_claims_never_hold_or_fail_and_cpu_answered_ones_do():
    records = [ddp("allreduce", "every_micro_batch", 1000, calls=0.125, bytes_=4000.0),
               ddp("allreduce", "no_sync", 1500, calls=0.03125, bytes_=1000.0),
               ddp("fp16_compress", "no_sync", 3500, sent=0.5)]
    cpu = plan(("ddp", ("compression", "accum_traffic", "accum_frequency")), device="cpu")
    v = judge(records, cpu)
    assert v["compression"]["status"] == METHOD_ON_CPU
    assert "NVLink and NCCL" in v["compression"]["reason"] and v["compression"]["measured"]
    assert v["accum_traffic"]["status"] == HOLDS and "a CPU answers it" in \
        v["accum_traffic"]["reason"]
    assert all(v[c.id]["status"] not in (HOLDS, FAILS) for c in REGISTER if not c.cpu_answers)


# ---- health -----------------------------------------------------------------------------------
def test_sibling_check_flags_the_slow_card_and_only_against_the_same_model():
    records = [peak("bf16", 280.0, 312.0), peak("bf16", 282.0, 312.0, "cuda:1", "siblings"),
               peak("bf16", 200.0, 312.0, "cuda:2", "siblings"),
               peak("bf16", 278.0, 312.0, "cuda:3", "siblings", copy_gbs=1000.0),
               peak("bf16", 150.0, 312.0, "cuda:4", "siblings", name="NVIDIA A100-PCIE-40GB")]
    health = judge(records, plan(("peak", ("health",)), ("siblings", ("health",))))[
        "_facts"]["health"]
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
    facts = judge([r, h], plan(("hierarchical", ("hierarchical",))))["_facts"]
    assert facts["health"]["busbw"]["rows"][0]["busbw_gbs"] == 150.0
    assert facts["figures"]["busbw.1073741824"]["value"] == 150.0
