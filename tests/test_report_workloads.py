"""What the report's reworked rows measure: the guide's placement (a Transformer's token
embedding on the CPU, its layers on the device, crossing through fresh or reused memory), a
DDP step of the lab's own Transformer on 2 gloo ranks with no_sync and a compressing hook, an
idle fraction's per-step samples and an energy meter's power samples (each figure's own
spread). GPU paths (pinned staging, bf16 DDP, NVML power) run in scripts/gpu_check.py."""

from __future__ import annotations

import statistics

import pytest

from a800lab.core.results import read_records
from a800lab.report.run import POINTS_FILE
from a800lab.workloads.comm.runs import check_point
from a800lab.workloads.pipeline import PipelineRun, pipeline_point
from a800lab.workloads.placement import lm_placement_point
from a800lab.workloads.usage import metered_run

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_the_guides_placement_on_a_cpu_moves_nothing_and_checks_its_input():
    whole = lm_placement_point("all_on_device", size="tiny", batch_size=8, budget_s=0.05)
    split = lm_placement_point("embedding_on_cpu", "reused", size="tiny", batch_size=8,
                               budget_s=0.05)
    for r in (whole, split):
        assert r["throughput"] > 0 and r["crossing_bytes_per_step"] == 0   # one device
        assert r["table_bytes"] == 32 * 32 * 4            # the tiny preset's vocab x d_model
        assert r["activation_bytes"] == 8 * 32 * 32 * 4    # batch x tokens x d_model, fp32
    assert split["table_on"] == "CPU" and not split["pinned"]
    for bad, match in (({"placement": "moon"}, "placement="), ({"staging": "cached"},
                                                               "staging="),
                       ({"size": "huge"}, "size="), ({"batch_size": 0}, "batch_size")):
        with pytest.raises(ValueError, match=match):
            lm_placement_point(**{"placement": "all_on_device", **bad})


def test_per_step_idle_fractions_are_the_idle_fractions_samples():
    run = PipelineRun(timing=None, spans=[
        ("data wait", 0, 0.0, 3.0), ("copy", 0, 3.0, 3.0), ("compute", 0, 3.0, 4.0),
        ("data wait", 1, 4.0, 5.0), ("copy", 1, 5.0, 5.0), ("compute", 1, 5.0, 8.0)])
    assert run.idle_per_step == pytest.approx([0.75, 0.25])
    assert run.idle_fraction == pytest.approx(0.5)
    point = pipeline_point(num_workers=0, preprocess_ms=0.2, batch_size=8, budget_s=0.05)
    assert len(point["idle_per_step"]) >= 5 and all(0 <= i <= 1 for i in point["idle_per_step"])
    # the whole window also holds the gaps between steps: a little more idle than their median
    assert statistics.median(point["idle_per_step"]) == pytest.approx(point["idle_fraction"],
                                                                      abs=0.1)


class _Meter:
    """An EnergyMeter stand-in with three power samples (as a GPU's sampler gives)."""

    power_samples_w = [300.0, 310.0, 320.0]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def reading(self):
        from a800lab.workloads.energy import EnergyReading

        return EnergyReading(31.0, "energy_counter", "test", 0.1, 0.1)


def test_a_metered_run_keeps_its_power_samples():
    result = metered_run(lambda: None, 1, device="cpu", duration_s=0.05, warmup_s=0.0,
                         meter=_Meter())
    assert result["power_w_samples"] == [300.0, 310.0, 320.0]


def test_a_ddp_point_of_an_unknown_size_or_precision_is_refused_before_ranks_start():
    base = {"world_size": 2, "backend": "gloo", "hook": "allreduce"}
    with pytest.raises(ValueError, match="size='huge' for model 'transformer'"):
        check_point("ddp", {**base, "model": "transformer", "size": "huge"})
    with pytest.raises(ValueError, match="precision='fp8'"):
        check_point("ddp", {**base, "precision": "fp8"})
    check_point("ddp", {**base, "model": "transformer", "size": "tiny", "micro_batch": 16})


def test_the_quick_batterys_ddp_step_trains_the_labs_transformer_on_two_gloo_ranks(
        quick_cpu_report):
    """The report's compression row on a CPU: the tiny Transformer, 4 micro-batches of 16 per
    step, plain all-reduce after each, no_sync, and the compressing hooks with no_sync."""
    _, folder = quick_cpu_report
    out = {(r.params["hook"], r.params["sync"]): r.metrics
           for r in read_records(folder / POINTS_FILE) if r.label == "ddp"}
    assert {(r.params["model"], r.params["size"], r.params["micro_batch"])
            for r in read_records(folder / POINTS_FILE) if r.label == "ddp"} == {
        ("transformer", "tiny", 16)}
    plain = out["allreduce", "every_micro_batch"]
    assert plain["global_batch"] == 16 * 4 * 2
    assert plain["syncs_per_step"] == 4 and out["allreduce", "no_sync"]["syncs_per_step"] == 1
    assert plain["bytes_per_step"] == 4 * plain["grad_bytes"]
    assert out["allreduce", "no_sync"]["bytes_per_step"] == plain["grad_bytes"]
    assert out["fp16_compress", "no_sync"]["sent_vs_fp32"] == pytest.approx(0.5)
    losses = [m["eval_loss"] for m in out.values()]
    assert statistics.pstdev(losses) < 0.2 * statistics.mean(losses)   # the same task learned
