"""The max-batch finder against an injected memory limit (no real OOM needed), and the split of
a target effective batch into micro-batches and accumulation steps."""

import gc
import weakref

import pytest
import torch

from a800lab.core.memory import is_oom
from a800lab.core.units import MIB
from a800lab.workloads.models.presets import preset
from a800lab.workloads.training import max_batch as mb
from a800lab.workloads.training.max_batch import (
    find_max_batch,
    find_max_batch_for,
    plan_effective_batch,
)
from a800lab.workloads.training.memory import InjectedOOM, MemoryBreakdown
from a800lab.workloads.training.spec import TrainSpec
from a800lab.workloads.training.trainer import measure_step_memory

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---- planning an effective batch ---------------------------------------------------------------
@pytest.mark.parametrize("target, largest, micro, accum", [
    (1024, 300, 256, 4),   # 1024 / 300 -> 4 steps of 256
    (1024, 1024, 1024, 1),
    (96, 40, 32, 3),
    (100, 7, 5, 20),       # 15 steps would not divide 100: 20 x 5
])
def test_a_target_is_split_exactly_never_shrunk(target, largest, micro, accum):
    plan = plan_effective_batch(target, largest)
    assert (plan.batch_size, plan.accum_steps) == (micro, accum)
    assert plan.effective_batch == target and plan.batch_size <= largest


def test_an_awkward_target_says_what_it_costs():
    plan = plan_effective_batch(97, 40)  # a prime: only 97 x 1
    assert (plan.batch_size, plan.accum_steps) == (1, 97)
    assert "97 splits evenly only as 97 x 1" in plan.note and "a target of 120" in plan.note


def test_bad_targets_and_nothing_fitting_are_clear_errors():
    with pytest.raises(ValueError, match="target_batch=0 must be a positive int"):
        plan_effective_batch(0, 8)
    with pytest.raises(ValueError, match="not even a micro-batch of 1 fits"):
        plan_effective_batch(64, 0)


# ---- the search, with a fake step --------------------------------------------------------------
class FakeStep:
    """A step needing static + per_sample * batch bytes (+ growth after the 2nd cycle), that
    raises an out-of-memory error above `limit`. Each trial holds a real tensor while it runs,
    so a test can see when it is freed."""

    def __init__(self, limit: int, static: int = 1000, per_sample: int = 100,
                 late_growth: int = 0):
        self.limit, self.static, self.per_sample = limit, static, per_sample
        self.late_growth = late_growth
        self.calls: list[tuple[int, int, int]] = []
        self.held: list[weakref.ref] = []
        self.alive_at_call: list[int] = []

    def __call__(self, batch_size: int, accum_steps: int, cycles: int):
        self.alive_at_call.append(sum(ref() is not None for ref in self.held))
        self.calls.append((batch_size, accum_steps, cycles))
        tensors = torch.empty(1024)  # what a failed step leaves in its frame
        self.held.append(weakref.ref(tensors))
        peak = self.static + self.per_sample * batch_size
        if cycles > 2:
            peak += self.late_growth
        if peak > self.limit:
            raise InjectedOOM(f"out of memory (fake): {peak} > {self.limit}")
        return MemoryBreakdown(param_bytes=self.static, grad_bytes=0, optimizer_state_bytes=0,
                               activation_bytes=peak - self.static, weight_copy_bytes=0,
                               recompute_bytes=0, data_bytes=0, peak_bytes=peak,
                               meter="counted")


def _true_max(step: FakeStep, budget: float) -> int:
    return int((budget - step.static) // step.per_sample)


def test_finds_the_boundary_with_the_margin():
    step = FakeStep(limit=100_000)
    found = find_max_batch(step, limit_bytes=100_000, margin=0.1, resolution=0)
    assert found.batch_size == _true_max(step, 90_000) == 890
    assert found.verified.peak_bytes <= found.budget_bytes
    assert found.predicted_bytes == pytest.approx(found.measured_bytes)
    assert ("verify", 890, 1, "ok") in [(t.stage, t.batch_size, t.accum_steps, t.outcome)
                                         for t in found.trials]


def test_the_model_skips_hopeless_trials_and_needs_fewer_runs_than_doubling():
    with_model = find_max_batch(FakeStep(limit=1_000_000), limit_bytes=1_000_000,
                                resolution=0)
    doubling = find_max_batch(FakeStep(limit=1_000_000), limit_bytes=1_000_000,
                              resolution=0, use_model=False)
    assert with_model.batch_size == doubling.batch_size == 8990
    assert any(t.outcome == "skipped" for t in with_model.trials)
    assert with_model.runs <= 10 and 3 * with_model.runs <= doubling.runs
    assert not any(t.outcome == "oom" for t in with_model.trials)
    assert any(t.outcome == "oom" for t in doubling.trials)


def test_memory_is_freed_after_each_oom_before_the_next_trial(monkeypatch):
    step = FakeStep(limit=50_000)
    freed_at = []

    def free():  # called after the except block: the failed trial's tensor is already gone
        gc.disable()  # a reference cycle would need gc; refcounting alone must do it
        try:
            freed_at.append(sum(ref() is not None for ref in step.held))
        finally:
            gc.enable()

    monkeypatch.setattr(mb, "free_after_oom", free)
    found = find_max_batch(step, limit_bytes=50_000, use_model=False)
    ooms = sum(t.outcome == "oom" for t in found.trials)
    assert ooms >= 1 and len(freed_at) == ooms
    assert freed_at == [0] * ooms
    assert step.alive_at_call == [0] * len(step.calls)


def test_a_step_that_grows_after_the_first_steps_is_caught_by_verification():
    """Two cycles fit, the third needs more (the classic OOM after the finder): the answer is
    lowered until the verification's full steps pass, so it never fails later."""
    step = FakeStep(limit=100_000, late_growth=5_000)
    found = find_max_batch(step, limit_bytes=100_000, margin=0.1, resolution=0)
    failed = [t for t in found.trials if t.stage == "verify" and not t.fits]
    assert failed, "the first verification should have failed"
    assert found.batch_size == int((90_000 - 5_000 - 1000) // 100) == 840
    assert found.verified.fits and found.verified.peak_bytes <= 90_000
    step(found.batch_size, 1, 10)  # does not raise


def test_a_target_batch_is_planned_and_the_plan_verified():
    step = FakeStep(limit=100_000)
    found = find_max_batch(step, limit_bytes=100_000, target_batch=2000, accum_steps=2)
    assert found.plan.effective_batch == 2000 and found.plan.batch_size <= found.batch_size
    verified = [(b, a) for b, a, c in step.calls if c == mb.VERIFY_STEPS]
    assert (found.plan.batch_size, found.plan.accum_steps) in verified


def test_nothing_fits_and_other_errors_propagate():
    found = find_max_batch(FakeStep(limit=500), limit_bytes=500)
    assert found.batch_size == 0 and "even a micro-batch of 1 does not fit" in found.summary()

    def broken(batch_size, accum_steps, cycles):
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        find_max_batch(broken, limit_bytes=10**6)
    with pytest.raises(ValueError, match="margin=1.5 must be in"):
        find_max_batch(broken, limit_bytes=10**6, margin=1.5)


# ---- the search on a real training step, limit injected -----------------------------------------
def test_real_steps_under_an_injected_limit():
    spec = TrainSpec(model="transformer", precision="fp32")
    limit = 16 * MIB
    found = find_max_batch_for(spec, device="cpu", limit_bytes=limit, target_batch=300)
    assert found.batch_size > 8 and found.verified.fits
    over = [t for t in found.trials if t.outcome in ("oom", "over", "skipped")]
    assert over and min(t.batch_size for t in over) <= found.batch_size * (1 + 1 / 64) + 1
    # the answer really runs: more steps, the same limit, no out-of-memory
    plan = found.plan
    for micro, accum in ((found.batch_size, 2), (plan.batch_size, plan.accum_steps)):
        steps = measure_step_memory(TrainSpec(model="transformer", batch_size=micro,
                                              accum_steps=accum), preset("transformer"), "cpu",
                                    cycles=5, limit_bytes=limit)
        assert steps.peak_bytes <= found.budget_bytes
    with pytest.raises(Exception) as info:
        measure_step_memory(TrainSpec(model="transformer", batch_size=2 * found.batch_size),
                            preset("transformer"), "cpu", cycles=2, limit_bytes=limit)
    assert is_oom(info.value)
    assert "Target 300 = " in found.summary()
    assert found.plan.accum_steps > 1 and found.plan.warning == ""  # LayerNorm: no warning


def test_a_batch_norm_model_is_warned_when_the_plan_accumulates():
    """max-batch planned "64 x 4 accumulation" for a batch-norm model without a word, while
    the tuner failed every accumulated config of it."""
    found = find_max_batch_for(TrainSpec(model="cnn"), device="cpu", limit_bytes=2 * MIB,
                               target_batch=256)
    plan = found.plan
    assert plan.accum_steps > 1
    assert plan.warning.startswith("accumulation changes the result: the model's 5 batch-norm")
    assert plan.warning in found.summary() and found.to_dict()["plan"]["warning"]
