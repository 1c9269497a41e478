"""The training workload: spec validation, correct gradient accumulation, the scaler's skips,
user models and the sweep point."""

import math
import re

import pytest
import torch
from torch import nn

from a800lab.core.sweep import run_sweep
from a800lab.workloads.models.presets import MODELS, preset
from a800lab.workloads.models.task import check_task, custom_task
from a800lab.workloads.training.point import train_point
from a800lab.workloads.training.spec import TrainSpec, check_precision, precisions_for
from a800lab.workloads.training.trainer import Trainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---- the spec ---------------------------------------------------------------------------------
@pytest.mark.parametrize("field, value, says", [
    ("batch_size", 0, "batch_size=0 must be a positive int"),
    ("batch_size", 2.5, "batch_size=2.5 must be a positive int"),
    ("accum_steps", 0, "accum_steps=0 must be a positive int"),
    ("accum_steps", True, "accum_steps=True must be a positive int"),
    ("precision", "fp99", "unknown training precision 'fp99'"),
    ("optimizer", "lamb", "optimizer='lamb' is not a choice"),
    ("lr", float("nan"), "lr=nan must be a finite number > 0"),
    ("backoff_factor", 1.5, "backoff_factor=1.5 must be between 0 and 1"),
    ("growth_factor", 1.0, "growth_factor=1.0 must be > 1"),
])
def test_bad_specs_say_what_to_do(field, value, says):
    with pytest.raises(ValueError, match="^" + re.escape(says)):
        TrainSpec(**{field: value})


def test_spec_names_and_defaults():
    spec = TrainSpec(batch_size=8, accum_steps=4, precision="half")
    assert spec.precision == "fp16" and spec.uses_scaler and spec.effective_batch == 32
    assert not TrainSpec(precision="bf16").uses_scaler  # bf16 needs no scaler
    assert TrainSpec(precision="pure_bf16").precision == "bf16_pure"
    with pytest.raises(ValueError, match="a GradScaler rescues fp16 gradients"):
        TrainSpec(precision="fp32", grad_scaler=True)


def test_a_precision_the_device_lacks_is_refused_with_an_alternative():
    with pytest.raises(ValueError, match="tf32 is a CUDA tensor-core mode.*use precision 'fp32'"):
        check_precision("tf32", "cpu")
    assert "tf32" not in precisions_for("cpu") and "fp32" in precisions_for("cpu")


# ---- accumulation ------------------------------------------------------------------------------
def _one_update(model: str, batch_size: int, accum_steps: int, micro_batches):
    """(gradients the optimizer saw, parameters after its step) of one SGD cycle."""
    spec = TrainSpec(model=model, batch_size=batch_size, accum_steps=accum_steps,
                     optimizer="sgd", lr=1e-2)
    trainer = Trainer(spec, preset(model), "cpu")
    seen = {}
    flat = lambda tensors: torch.cat([t.detach().flatten() for t in tensors])  # noqa: E731
    trainer.cycle(micro_batches, before_step=lambda: seen.update(
        grads=flat(p.grad for p in trainer.model.parameters())))
    return seen["grads"], flat(trainer.model.parameters())


def _update_pair(model: str, k: int = 4, b: int = 8):
    """One cycle of k micro-batches of b, and one of their concatenation as a batch of k*b."""
    task, generator = preset(model), torch.Generator().manual_seed(3)
    micro = [task.make_batch(b, generator) for _ in range(k)]
    whole = [tuple(torch.cat(parts) for parts in zip(*micro, strict=True))]
    return _one_update(model, b, k, micro), _one_update(model, k * b, 1, whole)


@pytest.mark.parametrize("model", ["mlp", "transformer"])
def test_k_micro_batches_of_b_give_the_update_of_one_batch_of_k_times_b(model):
    (grads_k, params_k), (grads_1, params_1) = _update_pair(model)
    # the optimizer sees the same gradient (whatever it is), so SGD makes the same step
    torch.testing.assert_close(grads_k, grads_1, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(params_k, params_1, rtol=1e-5, atol=1e-7)


def test_batch_norm_models_differ_by_design():
    """The CNN has batch norm: each micro-batch is normalised by its own statistics, so
    accumulation is not one big batch (use group/layer norm where it must be)."""
    (grads_k, _), (grads_1, _) = _update_pair("cnn")
    assert not torch.allclose(grads_k, grads_1, rtol=1e-4, atol=1e-6)


def test_one_optimizer_step_and_one_zero_grad_per_cycle(monkeypatch):
    trainer = Trainer(TrainSpec(batch_size=4, accum_steps=3), preset("mlp"), "cpu")
    calls = []
    for name in ("step", "zero_grad"):
        original = getattr(trainer.optimizer, name)
        monkeypatch.setattr(trainer.optimizer, name,
                            lambda *a, _o=original, _n=name, **k: (calls.append(_n), _o(*a, **k)))
    trainer.cycle(trainer.batches())
    assert calls == ["step", "zero_grad"]
    assert all(p.grad is None for p in trainer.model.parameters())  # nothing leaks onward


# ---- the scaler ---------------------------------------------------------------------------------
def _poisoned_task(poison_steps: set[int], poison: float = math.inf):
    """An MLP whose gradients turn to `poison` (inf or NaN) at the given (1-based) optimizer
    steps."""
    state = {"step": 0}

    def make_model():
        model = preset("mlp").make_model()
        model.inp.weight.register_hook(
            lambda g: g * poison if state["step"] in poison_steps else g)
        return model

    base = preset("mlp")
    return custom_task(make_model, lambda batch_size, generator: base.make_batch(
        batch_size, generator)), state


def test_scaler_skips_inf_steps_backs_off_and_grows():
    task, state = _poisoned_task({3})
    spec = TrainSpec(precision="fp16", batch_size=8, growth_interval=2, init_scale=1024.0)
    trainer = Trainer(spec, task, "cpu")
    history, weights = [], []
    for step in range(1, 6):
        state["step"] = step
        weights.append(trainer.model.inp.weight.detach().clone())
        history += trainer.train(1)
    assert [h["skipped"] for h in history] == [False, False, True, False, False]
    # 1024 -> grows after 2 clean steps -> 2048, halves on the inf -> 1024, grows again
    assert [h["scale"] for h in history] == [1024.0, 2048.0, 1024.0, 1024.0, 2048.0]
    after_skip = trainer.model.inp.weight.detach()
    assert torch.equal(weights[3], weights[2])  # the skipped step changed nothing
    assert not torch.equal(after_skip, weights[3])


def test_nan_gradients_are_skipped_too():
    task, state = _poisoned_task({1}, poison=math.nan)
    state["step"] = 1
    trainer = Trainer(TrainSpec(precision="fp16", batch_size=8), task, "cpu")
    (first,) = trainer.train(1)
    assert first["skipped"] and first["scale"] == 2.0**15


# ---- user models and bad inputs ------------------------------------------------------------------
def _make_batch(batch_size):
    return torch.randn(batch_size, 8), torch.randint(0, 3, (batch_size,))


def test_a_user_model_trains_and_is_checked_first():
    task = custom_task(lambda: nn.Linear(8, 3), _make_batch)
    check_task(task)
    point = train_point(task=task, batch_size=4, train_steps=3, budget_s=0.01, device="cpu")
    assert point["throughput"] > 0 and 0 <= point["accuracy"] <= 1


def test_a_user_model_that_raises_is_a_clear_error():
    task = custom_task(lambda: nn.Linear(5, 3), _make_batch)  # expects 5 features, gets 8
    with pytest.raises(ValueError, match="the model raised on a batch of 2 from make_batch: "
                                         "RuntimeError: mat1 and mat2 shapes cannot be "
                                         "multiplied"):
        check_task(task)


def test_a_batch_of_the_wrong_shape_is_a_clear_error():
    task = custom_task(lambda: nn.Linear(8, 3), lambda b: (torch.randn(b + 1, 8),
                                                           torch.zeros(b, dtype=torch.long)))
    with pytest.raises(ValueError, match=r"make_batch\(2\) returned inputs of shape \(3, 8\): "
                                         "the first dimension must be the batch size 2"):
        check_task(task)
    with pytest.raises(ValueError, match=r"must return \(inputs, targets\), got Tensor"):
        check_task(custom_task(lambda: nn.Linear(8, 3), lambda b: torch.randn(b, 8)))


def test_bad_points_fail_before_anything_is_built():
    built = []
    task = custom_task(lambda: built.append(1) or nn.Linear(8, 3), _make_batch)
    for bad in (dict(batch_size=0), dict(accum_steps=0), dict(precision="tf32")):
        with pytest.raises(ValueError):
            train_point(task=task, device="cpu", **bad)
    assert built == []


# ---- the sweep point ----------------------------------------------------------------------------
@pytest.mark.parametrize("model", MODELS)
def test_train_point_reports_throughput_learning_and_memory(model):
    point = train_point(model=model, batch_size=8, accum_steps=2, train_steps=4,
                        budget_s=0.01, device="cpu")
    assert point["throughput_unit"] == "samples/s" and point["effective_batch"] == 16
    assert point["throughput"] == pytest.approx(16 * point["optimizer_steps_per_s"])
    assert len(point["loss_curve"]) == 4 and math.isfinite(point["eval_loss"])
    assert point["param_bytes"] == point["grad_bytes"] + _buffer_bytes(model)
    assert point["activation_bytes"] > 0 and point["memory_meter"] == "counted"
    assert point["step_peak_bytes"] <= point["counted_bytes"]
    assert point["predicted_peak_bytes"] > 0 and point["scale"] is None


def _buffer_bytes(model: str) -> int:
    built = preset(model).make_model()
    frozen = sum(p.numel() * 4 for p in built.parameters() if not p.requires_grad)
    return sum(b.numel() * b.element_size() for b in built.buffers()) + frozen


def test_learning_shows_in_the_loss():
    point = train_point(model="mlp", batch_size=32, train_steps=40, lr=3e-3, budget_s=0.01,
                        device="cpu")
    assert point["loss_curve"][-1] < 0.9 * point["loss_curve"][0]


def test_fp16_point_reports_its_scaler():
    point = train_point(model="mlp", batch_size=8, precision="fp16", train_steps=3,
                        budget_s=0.01, device="cpu", predict_memory=False)
    assert point["scale"] == 2.0**16 and len(point["scale_curve"]) == 3
    assert point["skipped_steps"] == 0 and point["predicted_peak_bytes"] is None


def test_train_point_in_a_sweep_records_a_bad_point_as_an_error():
    result = run_sweep(train_point, {"batch_size": [4, 0]},
                       fixed={"train_steps": 2, "budget_s": 0.01, "predict_memory": False},
                       workload="train", device="cpu")
    ok, bad = result.records
    assert ok.outcome == "ok" and ok.metrics["effective_batch"] == 4
    assert bad.outcome == "error" and "batch_size=0 must be a positive int" in bad.message


def test_a_user_loss_keeps_accuracy_when_the_targets_are_labels():
    """The README's `loss_fn=` used to drop accuracy (None in every row)."""
    smooth = lambda outputs, targets: nn.functional.cross_entropy(  # noqa: E731
        outputs, targets, label_smoothing=0.1)
    task = custom_task(lambda: nn.Linear(8, 3), _make_batch, loss_fn=smooth)
    point = train_point(task=task, batch_size=4, train_steps=2, budget_s=0.01, device="cpu")
    assert 0 <= point["accuracy"] <= 1
    # targets that are not class labels (a regression) have no accuracy to count
    regression = custom_task(lambda: nn.Linear(8, 1),
                             lambda b: (torch.randn(b, 8), torch.randn(b, 1)),
                             loss_fn=nn.functional.mse_loss)
    point = train_point(task=regression, batch_size=4, train_steps=2, budget_s=0.01,
                        device="cpu")
    assert point["accuracy"] is None and point["eval_loss"] > 0
