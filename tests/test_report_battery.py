"""The report's battery: every claim covered by a step or an untestable reason, on a CPU and on
GPU boxes of one, two and eight cards (the GPU plans built here with the support checks faked)."""

from __future__ import annotations

import pytest

from a800lab.report import battery as rb
from a800lab.report.claims import CLAIMS

A100_NO_FP8 = "fp8 needs compute capability >= 8.9 (Ada/Hopper); this A100 is 8.0"


@pytest.fixture
def a100(monkeypatch):
    """plan_battery on an A100-like card: every precision but fp8, 2:4 sparsity, Triton."""
    monkeypatch.setattr(rb, "unsupported_reason",
                        lambda p, device: A100_NO_FP8 if p == "fp8" else None)
    monkeypatch.setattr(rb, "sparsity_unsupported_reason", lambda *a, **k: None)
    monkeypatch.setattr(rb, "HAS_TRITON", True)


def covered(plan: rb.Plan) -> set[str]:
    return {c for s in plan.steps for c in s.claims} | set(plan.untestable)


@pytest.mark.parametrize("mode", rb.MODES)
def test_every_claim_is_measured_or_says_why_on_a_cpu(mode):
    plan = rb.plan_battery(mode, "cpu")
    assert set(CLAIMS) <= covered(plan)
    assert all(reason.startswith("no NVIDIA GPU here") for reason in plan.untestable.values())
    assert all(p.get("device", "cpu") == "cpu" for s in plan.steps for p in s.points)
    assert not any(s.ranks for s in plan.steps)


def test_cpu_quick_is_small_and_full_is_larger():
    quick, full = rb.plan_battery("quick", "cpu"), rb.plan_battery("full", "cpu")
    assert quick.points < full.points and quick.estimate_s < 60
    assert all(p["precision"] == "fp32" for p in next(
        s for s in quick.steps if s.name == "tiles").points)   # CPU-mode defaults stay fp32


@pytest.mark.usefixtures("a100")
@pytest.mark.parametrize("mode, gpus", [("quick", 1), ("quick", 2), ("full", 1), ("full", 8)])
def test_gpu_plans_cover_every_claim_and_fit_their_time(mode, gpus):
    plan = rb.plan_battery(mode, "cuda:0", gpu_count=gpus)
    assert set(CLAIMS) <= covered(plan)
    assert plan.untestable["fp8_speed"] == A100_NO_FP8
    peak = next(s for s in plan.steps if s.name == "peak")
    assert {p["precision"] for p in peak.points} == {"fp32", "tf32", "fp16", "bf16"}
    if gpus == 1:
        assert "one GPU here" in plan.untestable["compression"]
        assert not any(s.ranks for s in plan.steps)
    else:
        siblings = next(s for s in plan.steps if s.name == "siblings")
        assert {p["device"] for p in siblings.points} == {f"cuda:{i}" for i in range(1, gpus)}
        assert {s.name: s.ranks for s in plan.steps if s.ranks} == {"busbw": gpus,
                                                                     "compression": gpus}
    if mode == "quick" and gpus == 1:
        assert plan.estimate_s <= 1.5 * rb.BUDGET_S["quick"]   # "about 2 minutes"
    if mode == "full" and gpus == 1:
        assert plan.estimate_s <= rb.BUDGET_S["full"]          # "about 15 minutes"


def test_without_triton_the_tile_claims_say_so(monkeypatch, a100):
    from a800lab.core import backends

    monkeypatch.setattr(rb, "HAS_TRITON", False)
    monkeypatch.setitem(backends._REASONS, "triton", "the triton package is not installed")
    plan = rb.plan_battery("quick", "cuda:0", gpu_count=1)
    assert "tiles" not in {s.name for s in plan.steps}
    assert plan.untestable["tile_spread"] == plan.untestable["tile_peak"]
    assert "riton" in plan.untestable["tile_spread"]


def test_bad_mode_and_device_are_refused():
    with pytest.raises(ValueError, match="mode 'fast'"):
        rb.plan_battery("fast", "cpu")
    with pytest.raises(ValueError, match="device 'tpu'"):
        rb.plan_battery("quick", "tpu")
