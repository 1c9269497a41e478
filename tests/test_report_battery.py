"""The report's battery: every measurable claim covered by a step or an untestable reason, on a
CPU and on GPU boxes of one, two and eight cards (the GPU plans built here with the support
checks faked), the guide's own configurations planned, and every point a function knows."""

from __future__ import annotations

import inspect

import pytest

from a800lab.core import backends
from a800lab.report import battery as rb
from a800lab.report import plan_gpu
from a800lab.report.register import REGISTER

A100_NO_FP8 = "fp8 needs compute capability >= 8.9 (Ada/Hopper); this A100 is 8.0"
MEASURABLE = {c.id for c in REGISTER if not c.not_measurable}


@pytest.fixture
def a100(monkeypatch):
    """plan_battery on an A100-like card: every precision but fp8, 2:4 sparsity, Triton, and
    torchvision installed."""
    monkeypatch.setattr(plan_gpu, "unsupported_reason",
                        lambda p, device: A100_NO_FP8 if p == "fp8" else "")
    monkeypatch.setattr(plan_gpu, "sparsity_unsupported_reason", lambda *a, **k: "")
    monkeypatch.setattr(plan_gpu, "HAS_TRITON", True)
    monkeypatch.setattr(plan_gpu, "torchvision_reason", lambda: "")
    monkeypatch.setattr(plan_gpu, "fitting_points", lambda points, device: (list(points), 0))


def covered(plan: rb.Plan) -> set[str]:
    return {c for s in plan.steps for c in s.claims} | set(plan.untestable)


def test_every_step_names_real_claims_and_a_point_function_that_takes_its_params():
    for plan in (rb.plan_battery("quick", "cpu"), rb.plan_battery("full", "cpu")):
        for step in plan.steps:
            assert set(step.claims) <= MEASURABLE | {"health"}, step.name
            if step.ranks:
                continue
            fn = inspect.signature(rb.POINTS[step.workload]).parameters
            for point in step.points:
                assert set(point) | set(step.settings) <= set(fn), (step.name, point)


@pytest.mark.parametrize("mode", rb.MODES)
def test_every_measurable_claim_is_measured_or_says_why_on_a_cpu(mode):
    plan = rb.plan_battery(mode, "cpu")
    assert MEASURABLE <= covered(plan)
    assert all(reason.startswith("no NVIDIA GPU here") for reason in plan.untestable.values())
    assert all(p.get("device", "cpu") == "cpu" for s in plan.steps for p in s.points)
    # the communication claims run on 2 gloo ranks: the counting ones a CPU answers
    assert {s.name: s.ranks for s in plan.steps if s.ranks} == {"hierarchical": 2, "ddp": 2}
    assert all(p["backend"] == "gloo" for s in plan.steps if s.ranks for p in s.points)


def test_the_cpu_battery_measures_the_guides_configurations_in_fp32():
    plan = rb.plan_battery("quick", "cpu")
    steps = {s.name: s for s in plan.steps}
    guide = [(p["block_m"], p["block_n"], p["block_k"]) for p in steps["guide_tiles"].points
             if p["backend"] == "cpu_blocked"]
    assert guide == [(16, 16, 16), (32, 16, 16)]
    assert {p["backend"] for p in steps["guide_tiles"].points} == {"cpu_blocked", "torch"}
    assert all(p["precision"] == "fp32" for s in ("tiles", "guide_tiles")
               for p in steps[s].points)      # CPU-mode defaults stay fp32
    assert {p["precision"] for p in steps["amp"].points} == {"fp32_default", "fp16"}
    assert [p["num_workers"] for p in steps["pipeline"].points] == [0, 1]   # one lever
    assert {(p["embedding"], p["optimizer"]) for p in steps["embeddings"].points} == {
        ("fp32", "adamw"), ("fp16", "adamw"), ("fp32", "sgd"), ("fp16", "sgd")}
    quick, full = plan, rb.plan_battery("full", "cpu")
    assert quick.points < full.points and quick.estimate_s < 60


@pytest.mark.usefixtures("a100")
@pytest.mark.parametrize("mode, gpus", [("quick", 1), ("quick", 2), ("full", 1), ("full", 8)])
def test_gpu_plans_cover_every_claim_and_fit_their_time(mode, gpus):
    plan = rb.plan_battery(mode, "cuda:0", gpu_count=gpus)
    assert MEASURABLE <= covered(plan)
    assert plan.untestable["fp8_speed"] == A100_NO_FP8
    steps = {s.name: s for s in plan.steps}
    assert {p["precision"] for p in steps["peak"].points} == {"fp32", "tf32", "fp16", "bf16"}
    amp = steps["amp"].points
    assert {(p["model"], p["size"]) for p in amp} == {("transformer", "gpt2_small"),
                                                      ("resnet50", "224")}
    assert {"fp32_default", "tf32", "fp16"} <= {p["precision"] for p in amp}
    guide = {(p["block_m"], p["block_n"]) for p in steps["guide_tiles"].points
             if p["backend"] == "triton"}
    assert guide == {(16, 16), (32, 16)}
    assert [(p["num_workers"], p["pin_memory"], p["non_blocking"])
            for p in steps["pipeline"].points] == [(0, False, False), (4, False, False),
                                                    (4, True, False), (4, True, True)]
    assert {s for s in steps if s.startswith("energy")} == {"energy", "energy_sparse"}
    if gpus == 1:
        assert "one GPU here" in plan.untestable["compression"]
        assert not any(s.ranks for s in plan.steps)
    else:
        siblings = steps["siblings"]
        assert {p["device"] for p in siblings.points} == {f"cuda:{i}" for i in range(1, gpus)}
        assert {s.name: s.ranks for s in plan.steps if s.ranks} == {"hierarchical": gpus,
                                                                     "ddp": gpus}
        rpn = {p.get("ranks_per_node") for p in steps["hierarchical"].points
               if p["op"] == "hierarchical_all_reduce"}
        assert rpn == {gpus // 2 if gpus >= 4 else 1}
    if mode == "full" and gpus == 1:
        assert plan.estimate_s <= rb.BUDGET_S["full"]          # "about 15 minutes"


def test_without_torchvision_resnet50_says_why_and_the_transformer_still_runs(monkeypatch,
                                                                               a100):
    monkeypatch.setattr(plan_gpu, "torchvision_reason", lambda: "torchvision is not installed")
    plan = rb.plan_battery("quick", "cuda:0", gpu_count=1)
    amp = next(s for s in plan.steps if s.name == "amp")
    assert {p["model"] for p in amp.points} == {"transformer"}
    assert "torchvision is not installed" in plan.untestable["buffers_resnet50"]


def test_the_tile_step_leaves_out_what_the_compiler_refuses_on_the_card(monkeypatch, a100):
    from a800lab.workloads.tiles import config

    seen = {}

    def refusing(specs, device):  # as the compiler would for a card with little shared memory
        seen["device"] = device
        return {i: "shared memory: too much" for i, s in enumerate(specs) if s.block_k == 64}

    monkeypatch.setattr(config, "refused_configs", refusing)
    monkeypatch.setattr(plan_gpu, "fitting_points", config.fitting_points)
    tiles = next(s for s in rb.plan_battery("full", "cuda:0", gpu_count=1).steps
                 if s.name == "tiles")
    assert seen["device"] == "cuda:0" and tiles.points
    assert all(p["block_k"] == 32 for p in tiles.points)
    assert f"{len(rb.default_grid_points('triton')) - len(tiles.points)} configs the compiler " \
           "refuses here left out" in tiles.what


def test_without_triton_the_tile_claims_say_so(monkeypatch, a100):
    monkeypatch.setattr(plan_gpu, "HAS_TRITON", False)
    monkeypatch.setitem(backends._REASONS, "triton", "the triton package is not installed")
    plan = rb.plan_battery("quick", "cuda:0", gpu_count=1)
    assert not {"tiles", "guide_tiles"} & {s.name for s in plan.steps}
    assert plan.untestable["tile_shape"] == plan.untestable["tc_peak"]
    assert "riton" in plan.untestable["tile_shape"]


def test_bad_mode_and_device_are_refused():
    with pytest.raises(ValueError, match="mode 'fast'"):
        rb.plan_battery("fast", "cpu")
    with pytest.raises(ValueError, match="device 'tpu'"):
        rb.plan_battery("quick", "tpu")
