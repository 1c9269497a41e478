"""The report's battery: one plan at two sizes. Every step a claim names exists at both sizes
or says why not, every measured claim is covered by its steps or an untestable reason, on a CPU
and on GPU boxes of one, two and eight cards (the GPU plans built here with the support checks
faked), winners re-timed in confirmation steps, deciding figures in three independent runs,
the DDP step on the lab's models at their published batch, and every point a function knows."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from a800lab.core import backends
from a800lab.core.results import Record
from a800lab.report import plan as rp
from a800lab.report.claims import RUN, RUNS
from a800lab.report.register import REGISTER
from a800lab.workloads.pipeline import PipelineSpec
from a800lab.workloads.serving.spec import ServeSpec
from a800lab.workloads.training.spec import TrainSpec

A100_NO_FP8 = "fp8 needs compute capability >= 8.9 (Ada/Hopper); this A100 is 8.0"
MEASURED = [c for c in REGISTER if c.judge]


@pytest.fixture
def a100(monkeypatch):
    """plan_battery on an A100-like card: every precision but fp8, 2:4 sparsity, Triton, and
    torchvision installed."""
    monkeypatch.setattr(rp, "unsupported_reason",
                        lambda p, device: A100_NO_FP8 if p == "fp8" else "")
    monkeypatch.setattr(rp, "sparsity_unsupported_reason", lambda *a, **k: "")
    monkeypatch.setattr(backends, "HAS_TRITON", True)
    monkeypatch.setattr(backends, "torchvision_reason", lambda: "")
    monkeypatch.setattr(rp, "fitting_points", lambda points, device: (list(points), 0))


SPEC_FIELDS = {name: [f.name for f in dataclasses.fields(spec)]  # what **fields takes
               for name, spec in (("train", TrainSpec), ("pipeline", PipelineSpec),
                                  ("serve", ServeSpec))}


def covered(plan: rp.Plan) -> bool:
    """Every measured claim has a step in the plan, or a reason it is untestable here."""
    names = {s.name for s in plan.steps}
    return all(c.id in plan.untestable or set(c.steps) & names for c in MEASURED)


def test_the_steps_claims_name_exist_and_every_point_function_takes_its_params():
    every = {s.name for m in ("quick", "full") for d in ("cpu",)
             for s in rp.plan_battery(m, d).steps}
    named = {s for c in MEASURED for s in c.steps}
    assert named - every <= {"tf32_loss", "sparsity", "energy_sparse"}   # GPU-only steps
    for plan in (rp.plan_battery("quick", "cpu"), rp.plan_battery("full", "cpu")):
        for step in plan.steps:
            if step.ranks:
                continue
            fn = inspect.signature(rp.POINTS[step.workload]).parameters
            takes = set(fn) | (set(SPEC_FIELDS.get(step.workload, ())) if any(
                p.kind is p.VAR_KEYWORD for p in fn.values()) else set())  # **fields: its spec's
            for point in step.points:
                if rp.CONFIRM not in point:   # RUN is the battery's: the runner drops it
                    assert set(point) - {RUN} | set(step.settings) <= takes, (step.name, point)


@pytest.mark.parametrize("mode", rp.MODES)
def test_every_measured_claim_is_measured_or_says_why_on_a_cpu(mode):
    plan = rp.plan_battery(mode, "cpu")
    assert covered(plan)
    assert all(p.get("device", "cpu") == "cpu" for s in plan.steps for p in s.points)
    assert {s.name: s.ranks for s in plan.steps if s.ranks} == {"hierarchical": 2, "ddp": 2,
                                                               "ddp_confirm": 2}
    assert all(p["backend"] == "gloo" for s in plan.steps if s.ranks for p in s.points)
    assert plan.untestable["amp_speed"].startswith("no NVIDIA GPU here: the claim is "
                                                   "ResNet-50's")
    assert "tf32_loss" not in {s.name for s in plan.steps}


def test_the_cpu_plan_is_the_gpu_plan_at_small_sizes():
    cpu = {s.name: s for s in rp.plan_battery("quick", "cpu").steps}
    guide = [(p["block_m"], p["block_n"], p["block_k"]) for p in cpu["guide_tiles"].points
             if p["backend"] == "cpu_blocked"]
    assert guide == [(16, 16, 16), (32, 16, 16)]
    assert all(p["precision"] == "fp32" for s in ("tiles", "guide_tiles")
               for p in cpu[s].points)          # CPU-mode defaults stay fp32
    assert {p["precision"] for p in cpu["amp"].points} == {"fp32_default", "fp16"}
    assert [p["num_workers"] for p in cpu["pipeline"].points] == [0, 1]   # one lever
    assert {(p["precision"], p["seed"]) for p in cpu["amp_trains"].points} == {
        (p, s) for p in ("fp32_default", "fp16") for s in (0, 1, 2)}
    assert {(p["embedding"], p["optimizer_state"]) for p in cpu["embeddings"].points} == {
        ("fp32", "fp32"), ("fp16", "fp32"), ("fp16", "fp16")}
    assert len({p["seed"] for p in cpu["embeddings"].points}) == 3
    quick, full = rp.plan_battery("quick", "cpu"), rp.plan_battery("full", "cpu")
    assert quick.points < full.points and quick.estimate_s < BUDGET_CPU


BUDGET_CPU = 90.0   # the quick CPU battery's own estimate (its wall time is ~30 s)


@pytest.mark.usefixtures("a100")
@pytest.mark.parametrize("mode, gpus", [("quick", 1), ("quick", 2), ("full", 1), ("full", 8)])
def test_gpu_plans_cover_every_claim_and_fit_their_time(mode, gpus):
    plan = rp.plan_battery(mode, "cuda:0", gpu_count=gpus)
    assert covered(plan)
    assert plan.untestable["fp8_speed"] == A100_NO_FP8
    steps = {s.name: s for s in plan.steps}
    assert {p["precision"] for p in steps["peak"].points} == {"fp32", "tf32", "fp16", "bf16"}
    amp = steps["amp"].points
    assert {(p["model"], p["size"]) for p in amp} == {("transformer", "gpt2_small"),
                                                      ("resnet50", "224")}
    assert all(p.get("channels_last") for p in amp if p["model"] == "resnet50")
    assert {"fp32_default", "tf32", "fp16"} <= {p["precision"] for p in amp}
    guide = {(p["block_m"], p["block_n"]) for p in steps["guide_tiles"].points
             if p["backend"] == "triton"}
    assert guide == {(16, 16), (32, 16)}
    assert [(p["num_workers"], p["pin_memory"], p["non_blocking"])
            for p in steps["pipeline"].points if p[RUN] == 0] == [
        (0, False, False), (4, False, False), (4, True, False), (4, True, True)]
    for name in ("peak", "pipeline", "placement", "energy", "energy_sparse", "tiles_confirm",
                 "guide_tiles_confirm"):   # what decides a timed figure: three runs, interleaved
        assert {p[RUN] for p in steps[name].points} == set(range(RUNS)), name
        assert [p[RUN] for p in steps[name].points] == sorted(p[RUN] for p in
                                                               steps[name].points), name
    assert {p["precision"] for p in steps["amp"].points if p[RUN] > 0} == {"fp32_default",
                                                                          "fp16"}
    assert {(p["placement"], p["staging"], p["size"]) for p in steps["placement"].points} == {
        ("all_on_device", "fresh", "gpt2_small"), ("embedding_on_cpu", "fresh", "gpt2_small"),
        ("embedding_on_cpu", "reused", "gpt2_small")}
    assert [p["precision"] for p in steps["energy"].points if p[RUN] == 0] == ["fp32", "fp16"]
    assert "energy_sparse" in steps and "tf32_loss" in steps
    if gpus == 1:
        assert "one GPU here" in plan.untestable["compression"]
        assert not any(s.ranks for s in plan.steps)
    else:
        siblings = steps["siblings"]
        assert {p["device"] for p in siblings.points} == {f"cuda:{i}" for i in range(1, gpus)}
        assert {s.name: s.ranks for s in plan.steps if s.ranks} == {
            "hierarchical": gpus, "ddp": gpus, "ddp_confirm": gpus}
        ddp = {(p["model"], p["size"], p["micro_batch"], p["accum_steps"], p["precision"])
               for p in steps["ddp"].points}   # the published global batch: 512 and 256
        assert ddp == {("transformer", "gpt2_small", 8, 512 // (8 * gpus), "bf16"),
                       ("resnet50", "224", 32, max(1, 256 // (32 * gpus)), "bf16")}
        confirm = steps["ddp_confirm"].points
        assert [p[RUN] for p in confirm] == [r for r in range(RUNS) for _ in (0, 1)]
        assert all(p["hook"] == "allreduce" and p["sync"] == "every_micro_batch"
                   for p in confirm if rp.CONFIRM not in p)
    if mode == "full" and gpus == 1:
        assert plan.estimate_s <= rp.BUDGET_S["full"]          # "about 16 minutes"


def rec(label: str, params: dict, rate: float, outcome: str = "ok") -> Record:
    return Record(workload="tiles", params=params, outcome=outcome, label=label,
                  throughput=rate if outcome == "ok" else None)


def test_a_confirmation_step_re_times_the_winner_among_its_candidates():
    plan = rp.plan_battery("quick", "cpu")
    tiles, guide = plan.steps[1].points, [p for p in plan.steps[3].points
                                         if p["backend"] == "cpu_blocked"]
    records = [rec("tiles", tiles[0], 5.0), rec("tiles", tiles[1], 9.0),
               rec("tiles", tiles[2], 0.0, "oom"), rec("guide_tiles", guide[0], 1.0),
               rec("guide_tiles", guide[1], 2.0),
               rec("guide_tiles", {**guide[0], "backend": "torch"}, 50.0)]   # not a candidate
    resolved = {}
    for s, p in rp.resolve_points(plan, records):
        resolved.setdefault(s.name, []).append(p)
    assert resolved["tiles_confirm"] == [{**tiles[1], RUN: 0}]
    assert resolved["guide_tiles_confirm"] == [   # the better guide tile (not BLAS), and the
        {**guide[1], RUN: 0}, {**tiles[1], RUN: 0}]   # median ok tile (of two: the upper)
    assert rp.CONFIRM in resolved["ddp_confirm"][0]   # its candidates not measured yet
    full = rp.plan_battery("full", "cpu")                  # three runs: the winner in each
    assert [p[RUN] for s, p in rp.resolve_points(full, records)
            if s.name == "tiles_confirm"] == [0, 1, 2]


@pytest.mark.usefixtures("a100")
def test_without_torchvision_the_resnet50_rows_say_why_and_the_transformer_still_runs(
        monkeypatch):
    monkeypatch.setattr(backends, "torchvision_reason", lambda: "torchvision is not installed")
    plan = rp.plan_battery("quick", "cuda:0", gpu_count=1)
    amp = next(s for s in plan.steps if s.name == "amp")
    assert {p["model"] for p in amp.points} == {"transformer"}
    for cid in ("buffers_resnet50", "amp_speed", "mp_memory"):
        assert "torchvision is not installed" in plan.untestable[cid]


@pytest.mark.usefixtures("a100")
def test_the_tile_step_leaves_out_what_the_compiler_refuses_on_the_card(monkeypatch):
    from a800lab.workloads.tiles import config

    seen = {}

    def refusing(specs, device):  # as the compiler would for a card with little shared memory
        seen["device"] = device
        return {i: "shared memory: too much" for i, s in enumerate(specs) if s.block_k == 64}

    monkeypatch.setattr(config, "refused_configs", refusing)
    monkeypatch.setattr(rp, "fitting_points", config.fitting_points)
    tiles = next(s for s in rp.plan_battery("full", "cuda:0", gpu_count=1).steps
                 if s.name == "tiles")
    assert seen["device"] == "cuda:0" and tiles.points
    assert all(p["block_k"] == 32 for p in tiles.points)
    assert f"{len(rp.default_grid_points('triton')) - len(tiles.points)} configs the compiler " \
           "refuses here left out" in tiles.what


@pytest.mark.usefixtures("a100")
def test_without_triton_the_tile_claims_say_so(monkeypatch):
    monkeypatch.setattr(backends, "HAS_TRITON", False)
    monkeypatch.setitem(backends._REASONS, "triton", "the triton package is not installed")
    plan = rp.plan_battery("quick", "cuda:0", gpu_count=1)
    assert plan.untestable["tile_shape"] == plan.untestable["tc_peak"]
    assert "riton" in plan.untestable["tile_shape"]


def test_bad_mode_and_device_are_refused():
    with pytest.raises(ValueError, match="mode 'fast'"):
        rp.plan_battery("fast", "cpu")
    with pytest.raises(ValueError, match="device 'tpu'"):
        rp.plan_battery("quick", "tpu")
