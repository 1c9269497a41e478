"""The memory breakdown (exact counts), the saved-activation measure, and the memory model."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from a800lab.core.memory import is_oom
from a800lab.workloads.models.presets import preset
from a800lab.workloads.models.task import custom_task
from a800lab.workloads.training.memory import (
    InjectedOOM,
    MemoryBreakdown,
    SavedTensorCounter,
    fit_memory_model,
    static_bytes_per_param,
)
from a800lab.workloads.training.point import fit_from_probes
from a800lab.workloads.training.spec import TrainSpec
from a800lab.workloads.training.trainer import measure_step_memory

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _counts(model: nn.Module):
    params = list(model.parameters())
    return sum(p.numel() for p in params), len(params)


@pytest.mark.parametrize("precision, optimizer, weight, state_per_param", [
    ("fp32", "adamw", 4, 8),      # fp32 weights; Adam's exp_avg and exp_avg_sq in fp32
    ("bf16", "adamw", 4, 8),      # autocast keeps fp32 master weights and state
    ("fp32", "sgd", 4, 4),        # one momentum buffer
    ("bf16_pure", "adamw", 2, 4),  # everything in bf16
])
def test_params_grads_and_optimizer_state_are_counted_exactly(precision, optimizer, weight,
                                                             state_per_param):
    spec = TrainSpec(model="mlp", batch_size=4, precision=precision, optimizer=optimizer)
    breakdown = measure_step_memory(spec, preset("mlp"), "cpu", cycles=2)
    numel, tensors = _counts(preset("mlp").make_model())
    assert breakdown.param_bytes == weight * numel
    assert breakdown.grad_bytes == weight * numel
    # AdamW's per-parameter `step` counter is a float32 scalar tensor on the CPU
    step_counters = 4 * tensors if optimizer == "adamw" else 0
    assert breakdown.optimizer_state_bytes == state_per_param * numel + step_counters
    rule = static_bytes_per_param(precision, optimizer)
    assert breakdown.static_bytes - step_counters == rule * numel


def test_the_rule_of_thumb_for_mixed_precision_adamw_is_16_bytes_per_parameter():
    assert static_bytes_per_param("bf16", "adamw") == 16
    assert static_bytes_per_param("bf16_pure", "adamw") == 8
    with pytest.raises(ValueError, match="no rule for precision='fp8'"):
        static_bytes_per_param("fp8", "adamw")


def _two_layer():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


@pytest.mark.parametrize("batch", [1, 3, 8])
def test_saved_activations_match_a_hand_count(batch):
    """Linear(16, 32) -> ReLU -> Linear(32, 4) -> MSE, fp32. Saved for backward: the ReLU's
    output (b x 32, also the second Linear's input: one storage) and the MSE's input (b x 4);
    the batch and the weights are not activations."""
    model = _two_layer()
    x, y = torch.randn(batch, 16), torch.randn(batch, 4)
    with SavedTensorCounter(model.parameters(), exclude=(x, y)) as counter:
        F.mse_loss(model(x), y)
    assert counter.activation_bytes == batch * (32 + 4) * 4
    assert counter.weight_copy_bytes == 0


def test_autocast_weight_copies_are_counted_apart():
    model = _two_layer()
    x, y = torch.randn(8, 16), torch.randn(8, 4)
    with SavedTensorCounter(model.parameters(), exclude=(x, y)) as counter, \
            torch.autocast("cpu", dtype=torch.bfloat16):
        F.mse_loss(model(x), y)
    # the second Linear saves its bf16 weight copy (32 x 4 x 2 bytes) for the input's gradient;
    # the first needs no input gradient, so keeps no weight
    assert counter.weight_copy_bytes == 32 * 4 * 2
    assert counter.activation_bytes >= 8 * 32 * 2  # the ReLU output, now bf16


def test_checkpointing_trades_saved_activations_for_one_recomputed_block():
    spec = TrainSpec(model="transformer", batch_size=8)
    plain = measure_step_memory(spec, preset("transformer"), "cpu")
    ckpt = measure_step_memory(TrainSpec(model="transformer", batch_size=8, checkpointing=True),
                               preset("transformer"), "cpu")
    assert plain.recompute_bytes == 0 and ckpt.recompute_bytes > 0
    assert ckpt.activation_bytes < plain.activation_bytes / 3
    # two identical blocks: one recomputed block holds about half of what the plain forward saves
    assert ckpt.recompute_bytes < plain.activation_bytes


def test_an_injected_limit_raises_an_out_of_memory_error():
    with pytest.raises(InjectedOOM, match=r"out of memory \(injected limit\): after forward the "
                                          r"step holds 1\d\d\.\d KiB \(counted\), the limit is "
                                          r"97\.7 KiB") as info:
        measure_step_memory(TrainSpec(batch_size=64), preset("mlp"), "cpu",
                            limit_bytes=100_000)
    assert is_oom(info.value)


def test_the_optimizers_first_step_is_where_adam_state_appears():
    """Forward and backward fit; the first optimizer step (Adam's two state buffers) does not:
    the classic out-of-memory after a finder that never ran the optimizer."""
    spec = TrainSpec(batch_size=4)
    full = measure_step_memory(spec, preset("mlp"), "cpu", cycles=2)
    limit = full.static_bytes - full.optimizer_state_bytes // 2
    with pytest.raises(InjectedOOM, match="after step"):
        measure_step_memory(spec, preset("mlp"), "cpu", limit_bytes=limit)


def _breakdown(batch, peak_extra=0, per_sample_extra=0, accumulating=False):
    """1000 B of weights, 1000 B of grads, 2000 B of Adam state, 100 B of activations per
    sample; the measured peak = the phases' counted peak + extra (what counts cannot see)."""
    grads_in_forward = 1000 if accumulating else 0
    counted = 1000 + 2000 + max(grads_in_forward + 100 * batch, 1000)  # forward vs backward
    return MemoryBreakdown(param_bytes=1000, grad_bytes=1000, optimizer_state_bytes=2000,
                           activation_bytes=100 * batch, weight_copy_bytes=0, recompute_bytes=0,
                           data_bytes=0, peak_bytes=counted + peak_extra +
                           per_sample_extra * batch, meter="allocated")


def test_memory_model_knows_gradients_decide_small_batches_and_activations_large_ones():
    # both probes in the flat part (the backward's gradients are the peak) ...
    model = fit_memory_model([(2, _breakdown(2)), (4, _breakdown(4))], grads_in_forward=False)
    assert model.predict(4) == 4000 and model.static_bytes == 4000
    # ... still predict where the activations take over
    assert model.predict(20) == _breakdown(20).peak_bytes == 5000
    assert model.largest_batch(5000) == 20 and model.largest_batch(3999) == 0
    # accumulating: the gradients live through the next forward, on top of the activations
    probes = [(b, _breakdown(b, accumulating=True)) for b in (2, 4)]
    accum = fit_memory_model(probes, grads_in_forward=True)
    assert accum.residual == (0, 0) and accum.predict(20) == 6000


def test_memory_model_fits_what_the_counts_cannot_see():
    probes = [(b, _breakdown(b, peak_extra=64, per_sample_extra=8)) for b in (16, 32, 48)]
    model = fit_memory_model(probes, grads_in_forward=False)
    assert model.residual == pytest.approx((64, 8))
    assert model.predict(100) == pytest.approx(_breakdown(100, 64, 8).peak_bytes)
    assert model.per_sample_bytes == pytest.approx(108)
    with pytest.raises(ValueError, match="two or more micro-batch sizes"):
        fit_memory_model([(4, _breakdown(4)), (4, _breakdown(4))], grads_in_forward=False)


def test_memory_model_predicts_a_larger_batch_from_two_small_probes():
    spec = TrainSpec(model="transformer", precision="bf16")
    model = fit_from_probes(spec, preset("transformer"), "cpu", (2, 4))
    measured = measure_step_memory(TrainSpec(model="transformer", precision="bf16",
                                             batch_size=64), preset("transformer"), "cpu",
                                   cycles=2)
    assert model.predict(64) == pytest.approx(measured.peak_bytes, rel=1e-6)
    assert model.static_bytes == measured.static_bytes


def test_accumulation_keeps_the_gradients_alive_through_the_next_forward():
    task = custom_task(_two_layer, lambda b: (torch.randn(b, 16), torch.randn(b, 4)),
                       F.mse_loss)
    one = measure_step_memory(TrainSpec(batch_size=8, accum_steps=1), task, "cpu", cycles=2)
    two = measure_step_memory(TrainSpec(batch_size=8, accum_steps=2), task, "cpu", cycles=2)
    assert two.peak_bytes > one.peak_bytes
