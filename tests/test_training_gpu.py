"""The training lab on a real CUDA GPU: every precision trains, the allocator's peak against
the memory model, exact counts on the device, real out-of-memory errors in the finder."""

import math

import pytest
import torch

from a800lab.core.memory import free_after_oom
from a800lab.workloads.models.presets import preset
from a800lab.workloads.training.max_batch import find_max_batch_for
from a800lab.workloads.training.point import train_point
from a800lab.workloads.training.spec import TrainSpec, precisions_for
from a800lab.workloads.training.trainer import Trainer, measure_step_memory

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp16", "bf16", "bf16_pure"])
def test_every_precision_trains_on_the_gpu(precision):
    if precision not in precisions_for("cuda"):
        pytest.skip(f"{precision} is not supported on this GPU")
    point = train_point(model="transformer", size="small", batch_size=16, accum_steps=2,
                        precision=precision, train_steps=20, budget_s=0.2, lr=3e-3,
                        device="cuda")
    assert point["memory_meter"] == "allocated" and point["throughput"] > 0
    assert point["loss_curve"][-1] < point["loss_curve"][0]
    assert math.isfinite(point["eval_loss"])
    # the model fitted to probes at 4 and 8 predicts the peak at 16 on the real allocator
    assert abs(point["prediction_error"]) < 0.15


def test_counts_on_the_gpu_exclude_adams_cpu_step_counters():
    breakdown = measure_step_memory(TrainSpec(model="mlp", size="small", batch_size=8),
                                    preset("mlp", "small"), "cuda", cycles=2)
    numel = sum(p.numel() for p in preset("mlp", "small").make_model().parameters())
    assert breakdown.param_bytes == breakdown.grad_bytes == 4 * numel
    assert breakdown.optimizer_state_bytes == 8 * numel  # `step` counters stay on the CPU
    assert breakdown.peak_bytes >= breakdown.static_bytes


def test_fp16_inf_gradients_are_skipped_on_the_gpu():
    spec = TrainSpec(model="mlp", batch_size=8, precision="fp16", init_scale=2.0**16)
    trainer = Trainer(spec, preset("mlp"), "cuda")
    trainer.model.inp.weight.register_hook(lambda g: g * math.inf)
    (step,) = trainer.train(1)
    assert step["skipped"] and step["scale"] == 2.0**15


def test_the_finder_survives_real_out_of_memory_errors_and_frees_them():
    spec = TrainSpec(model="transformer", size="small")
    measure_step_memory(spec, preset("transformer", "small"), "cuda")  # cuBLAS workspaces made
    free_after_oom()
    cap = 2 * 2**30
    total = torch.cuda.get_device_properties(0).total_memory
    before = torch.cuda.memory_allocated()
    torch.cuda.set_per_process_memory_fraction((before + cap) / total)
    try:
        found = find_max_batch_for(spec, device="cuda", limit_bytes=int(cap * 1.5),
                                   use_model=False)  # doubling runs into the real cap
        assert any(t.outcome == "oom" for t in found.trials)
        assert torch.cuda.memory_allocated() == before  # every failed trial's memory freed
        assert found.batch_size > 0 and found.verified.fits
        measure_step_memory(TrainSpec(model="transformer", size="small",
                                      batch_size=found.batch_size),
                            preset("transformer", "small"), "cuda", cycles=5)  # runs
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        free_after_oom()
