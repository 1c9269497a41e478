"""The battery `a800lab report` runs: one plan at two sizes (CPU, GPU), every step the claims
name that can run here, and why each claim it cannot test is untestable. Nothing here measures.

    plan = plan_battery("quick", device="cpu")      # or "full"; "cuda:0" on a GPU box
"""

from collections.abc import Callable
from dataclasses import dataclass, field

from ..core import backends
from ..core.precision import unsupported_reason
from ..workloads.guide_snippets import guide_snippets_point
from ..workloads.peak import peak_point
from ..workloads.pipeline import pipeline_point
from ..workloads.placement import lm_placement_point
from ..workloads.serving.point import serve_point
from ..workloads.sparsity import sparse_point, sparsity_unsupported_reason
from ..workloads.tf_env import tf_python
from ..workloads.tiles.config import fitting_points
from ..workloads.tiles.point import tiled_matmul_point
from ..workloads.tiles.tune import default_grid
from ..workloads.training.max_batch import max_batch_point
from ..workloads.training.numerics import embedding_point, held_out_point
from ..workloads.training.point import accumulation_point, train_point
from ..workloads.training.spec import canonical_precision, matmul_precision_of
from ..workloads.usage import matmul_usage_point, sparse_usage_point
from .claims import RUN, RUNS
from .register import REGISTER

# Bumped when a step's points or what their records carry change meaning: a report folder's
# points from another version are measured again (report.run), never judged by today's rules.
BATTERY_VERSION = 6   # 6: runs, the guide's placement and DDP on the lab's models; 5: inference
MODES = ("quick", "full")
BUDGET_S = {"quick": 120.0, "full": 1200.0}
DDP_ACCUM_STEPS = 4   # micro-batches per optimizer step in the ddp step (no_sync: one sync)
RANKS_START_S = 6.0   # starting a rank group: processes, torch imports, DDP's first use
NO_GPU = "no NVIDIA GPU here"
CONFIRM = "confirm"   # a confirmation step's placeholder point, until its winner is known
PICK = "pick"         # a placeholder's choice among its step's records: "best" (default), "median"
SEEDS = (0, 1, 2)

POINTS: dict[str, Callable[..., dict]] = {
    "peak": peak_point, "tiles": tiled_matmul_point, "sparsity": sparse_point,
    "train": train_point, "accumulation": accumulation_point, "max_batch": max_batch_point,
    "pipeline": pipeline_point, "lm_placement": lm_placement_point, "held_out": held_out_point,
    "embedding": embedding_point, "matmul_usage": matmul_usage_point,
    "sparse_usage": sparse_usage_point, "serve": serve_point,
    "guide_snippets": guide_snippets_point,
}


@dataclass(frozen=True)
class Step:
    """One workload over a few points; `ranks` > 0 runs them on that many ranks (NCCL on GPUs,
    gloo on a CPU); `confirms` names the step whose winner this one re-times. A point's RUN
    numbers its independent runs (the runner measures it without that key)."""

    name: str
    workload: str
    points: tuple[dict, ...]
    settings: dict = field(default_factory=dict)   # the point function's options (not params)
    est_s: float = 1.0                             # rough seconds per point, for the ETA
    what: str = ""
    ranks: int = 0
    confirms: str = ""
    among: tuple = ()      # ((param, allowed values), ...): who may win the step confirmed

    def to_dict(self) -> dict:
        return {k: list(v) if k == "points" else v for k, v in vars(self).items() if k != "among"}


@dataclass(frozen=True)
class Plan:
    """The battery for one mode on one machine, and the claims it cannot test, with why."""

    mode: str
    device: str
    gpu_count: int
    steps: tuple[Step, ...]
    untestable: dict

    @property
    def points(self) -> int:
        return sum(len(s.points) for s in self.steps)

    @property
    def estimate_s(self) -> float:
        groups = {(s.ranks, s.points[0].get("backend")) for s in self.steps if s.ranks}
        return sum(s.est_s * len(s.points) for s in self.steps) + RANKS_START_S * len(groups)

    def to_dict(self) -> dict:
        return {**vars(self), "steps": [s.to_dict() for s in self.steps], "points": self.points,
                "estimate_s": self.estimate_s}


def pick(step: Step, placeholder: dict, records) -> dict | None:
    """The params a confirmation step's `placeholder` stands for: among the ok records of the
    step it names (and `step.among`), the fastest, or with PICK "median" the median one (the
    upper of two); None when there is none yet."""
    allowed = sorted((r for r in records if r.label == placeholder[CONFIRM] and r.outcome == "ok"
                      and r.throughput and all(r.params.get(k) in v for k, v in step.among)),
                     key=lambda r: r.throughput)
    if not allowed:
        return None
    chosen = allowed[len(allowed) // 2] if placeholder.get(PICK) == "median" else allowed[-1]
    return {k: v for k, v in chosen.params.items() if k != RUN}


def resolve_points(plan: Plan, records) -> list[tuple[Step, dict]]:
    """Every (step, params), a confirmation step's placeholders replaced by what they pick among
    `records` (in their run): kept until the points they pick from are all measured, dropped if
    none could be picked."""
    out, measured = [], {(r.label, repr(sorted(r.params.items()))) for r in records}
    points = {s.name: s.points for s in plan.steps}
    for step in plan.steps:
        for p in step.points:
            if CONFIRM not in p:
                out.append((step, p))
                continue
            chosen = pick(step, p, records)
            if chosen is not None:
                out.append((step, {**chosen, **({RUN: p[RUN]} if RUN in p else {})}))
            elif not all((p[CONFIRM], repr(sorted(c.items()))) in measured
                         for c in points.get(p[CONFIRM], ())):
                out.append((step, p))
    return out


def _runs(points, m: "Machine", deciding=lambda p: True) -> tuple[dict, ...]:
    """`points` in run 0, then again, run by run, in the machine's later runs (those `deciding`
    a claim's figure only): independent runs, not repeats back to back."""
    return tuple({**p, RUN: run} for run in range(m.runs) for p in points
                 if run == 0 or deciding(p))


# ---- the two sizes -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Machine:
    """What the plan is built for: the device, its GPU count, the mode."""

    device: str
    count: int
    full: bool

    @property
    def gpu(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def runs(self) -> int:
        """Independent runs of a deciding timed figure: RUNS, except in a quick CPU battery,
        which judges no timed claim (a CPU shows their methods)."""
        return RUNS if self.gpu or self.full else 1


def _train_ok(precision: str, device: str) -> bool:
    return not unsupported_reason(matmul_precision_of(canonical_precision(precision)), device)


def default_grid_points(backend: str) -> list[dict]:
    """The tile tuner's default grid for `backend`, with group_m filled in."""
    return [{"group_m": 8 if backend == "triton" else 1, **c} for c in default_grid(backend)]


def _tile_steps(m: Machine) -> list[Step]:
    """The tile kernel (Triton on a GPU, its stand-in on a CPU) over tile configs and over the
    guide's tiles beside the library matmul, each step's winner timed again."""
    if not m.gpu:
        shape = {"m": 256, "n": 256, "k": 256, "precision": "fp32", "backend": "cpu_blocked"}
        grid = default_grid_points("cpu_blocked") if m.full else [
            dict(block_m=b, block_n=b, block_k=64, group_m=1) for b in (32, 64, 128)]
        guide = [dict(block_m=bm, block_n=16, block_k=16, group_m=1) for bm in (16, 32)]
    else:
        precision = "fp16" if unsupported_reason("bf16", m.device) else "bf16"
        shape = {"m": 4096, "n": 4096, "k": 4096, "precision": precision, "backend": "triton"}
        keys = ("block_m", "block_n", "block_k", "num_warps", "num_stages")
        grid = default_grid_points("triton") if m.full else [
            dict(zip(keys, t, strict=True), group_m=8)
            for t in ((64, 64, 32, 4, 3), (64, 128, 32, 4, 4), (128, 64, 32, 4, 4),
                      (128, 128, 32, 4, 3), (128, 128, 64, 8, 3), (128, 256, 64, 8, 3),
                      (256, 128, 64, 8, 3), (256, 64, 32, 4, 3))]
        # the guide's 16x16 and 32x8 as thread-block tiles: tl.dot needs >= 16 per dimension,
        # so 32x8's nearest is 32x16; one warp per 16 rows, pipelined loads
        guide = [dict(block_m=bm, block_n=16, block_k=16, num_warps=bm // 16, num_stages=3,
                      group_m=8) for bm in (16, 32)]
    points = [{**shape, **t} for t in grid]
    points, refused = fitting_points(points, m.device) if m.gpu else (points, 0)
    note = f"; {refused} configs the compiler refuses here left out" if refused else ""
    p, small = shape["precision"], {k: shape[k] for k in ("m", "n", "k")}
    timing = {"settings": {"budget_s": 0.3, "warmup_s": 0.1}, "est_s": 3.0 if m.gpu else 1.0}
    return [
        Step("tiles", "tiles", tuple(points), what=f"the tile kernel over tile configs, "
             f"{small['m']}^3 {p}{note}", **timing),
        Step("tiles_confirm", "tiles", _runs(({CONFIRM: "tiles"},), m),
             what="the best tile, timed again in each run", confirms="tiles", **timing),
        Step("guide_tiles", "tiles", tuple({**shape, **t} for t in guide) + tuple(
            {**small, "precision": q, "backend": "torch"} for q in dict.fromkeys(("fp32", p))),
             what="the guide's 16x16 and 32x16 tiles, and the library matmul", **timing),
        Step("guide_tiles_confirm", "tiles", _runs(({CONFIRM: "guide_tiles"},
                                                     {CONFIRM: "tiles", PICK: "median"}), m),
             what="the better guide tile and the other tiles' median tile, timed again in each "
                  "run", confirms="guide_tiles",
             among=(("backend", ("triton", "cpu_blocked")),), **timing)]


def _steps(m: Machine) -> list[Step]:
    """Every step this machine can run, at its sizes (CPU: the chapters' small fp32 sizes and 2
    gloo ranks; GPU: the guide's own configurations and the box's GPUs as ranks)."""
    gpu, full, dev = m.gpu, m.full, m.device

    def g(on_gpu, on_cpu):   # at a GPU's size or a CPU's
        return on_gpu if gpu else on_cpu

    precisions = [p for p in ("fp32", "tf32", "fp16", "bf16", "fp8")
                  if gpu and not unsupported_reason(p, dev)] or ["fp32"]
    model = ("transformer", g("gpt2_small", "tiny"), g(8, 64))
    numerics = {"model": "transformer", "size": g("medium", "tiny"), "batch_size": 32}
    amp = ("fp32_default", "fp16") + (("fp32", "bf16") if full else ()) + g(("tf32",), ())
    held_out = 300 if full else 100
    workers = g(4, 1)
    steps = [
        Step("peak", "peak", _runs([{"device": dev, "precision": p, "size": g(8192, 512)}
                                    for p in precisions], m), {"budget_s": 0.3}, g(2.0, 1.5),
             f"matmul rate per precision and copy bandwidth on {dev}"),
        *(_tile_steps(m) if not gpu or backends.HAS_TRITON else []),
        Step("amp", "train", _runs([
            {"model": mo, "size": size, "batch_size": b, "precision": p,
             **({"channels_last": True} if mo == "resnet50" else {})}
            for mo, size, b in (model, ("resnet50", "224", 64)) if mo == "transformer"
            or (gpu and not backends.torchvision_reason()) for p in amp if _train_ok(p, dev)],
            m, lambda p: p["precision"] in ("fp32_default", "fp16")),
             {"train_steps": g(10, 3), "budget_s": g(0.5, 0.2), "predict_memory": False},
             g(10.0, 1.5),
             "training steps: AMP (fp16 + GradScaler) against the framework's default fp32"),
        Step("amp_trains", "held_out", tuple({"precision": p, **numerics, "seed": s}
                                             for p in ("fp32_default", "fp16") for s in SEEDS),
             {"train_steps": g(held_out, 20)}, g(6.0, 1.0),
             "held-out loss after the same steps, AMP against fp32, three seeds"),
        Step("embeddings", "embedding", tuple(
            {"embedding": e, "optimizer_state": "fp32", **numerics, "seed": s}
            for s in SEEDS for e in ("fp32", "fp16"))
            + ({"embedding": "fp16", "optimizer_state": "fp16", **numerics, "seed": 0},),
             {"train_steps": g(held_out, 40)}, g(4.0, 0.5),
             "embedding tables stored in fp16 against fp32, AdamW's state in fp32 in both"),
        Step("accumulation", "accumulation", tuple(
            {**numerics, "batch_size": b, "accum_steps": k, "precision": "fp32"}
            for b, k in ((64, 1), (16, 4))), {"train_steps": g(5, 3), "budget_s": g(0.5, 0.2)},
             g(6.0, 2.0), "the lab's accumulation loop against one large batch"),
        Step("max_batch", "max_batch", tuple(
            {"model": mo, "size": g("medium", "tiny"), "precision": p,
             "limit_mib": g(None if full else 8192, 256 if full else 32)}
            for mo in g(("mlp", "transformer", "cnn") if full else ("transformer",),
                        ("mlp", "transformer") if full else ("mlp",))
            for p in ("fp32", "bf16") if _train_ok(p, dev)), {},
             g(40.0 if full else 15.0, 3.0 if full else 1.0),
             "largest micro-batch, verified, with the memory model's prediction"),
        Step("pipeline", "pipeline", _runs([   # one lever added per point (pinned: a GPU's)
            {"preprocess_ms": g(0.05, 0.2), "cost": "cpu", "batch_size": g(64, 32),
             "prefetch_factor": 2, "num_workers": w, "pin_memory": pin, "non_blocking": nb}
            for w, pin, nb in [(0, False, False), (workers, False, False)]
            + g([(workers, True, False), (workers, True, True)], [])], m,
            lambda p: not p["pin_memory"]),
             {"budget_s": g(0.5, 0.3)}, g(4.0, 1.5),
             "the input pipeline, one lever added at a time"),
        Step("placement", "lm_placement", _runs([
            {"placement": p, "staging": st, "size": g("gpt2_small", "tiny"),
             "batch_size": g(4, 16)} for p, st in (("all_on_device", "fresh"),
                                                    ("embedding_on_cpu", "fresh"),
                                                    ("embedding_on_cpu", "reused"))], m),
             {"budget_s": g(0.5, 0.2)}, g(4.0, 0.5),
             "the Transformer's token embedding on the CPU (its activations crossing through "
             "fresh or reused pinned memory) or on the device, its layers on the device"),
        Step("inference", "serve", tuple({"model": "transformer", "batch_size": 1,
                                          "precision": p} for p in ("fp32", "fp16")),
             {"budget_s": g(0.3, 0.2)}, g(2.0, 1.5),
             "one request's latency (batch 1), fp32 then fp16: the guide's inference case's "
             "method"),
        Step("guide_snippets", "guide_snippets", ({"snippets": "D.3.1 D.4.6 D.4.8"},), {},
             15.0 if tf_python() else 0.5, "the getting-started guide's TensorFlow snippets "
             "(and D.3.1's PyTorch half) run as printed, in TensorFlow's own venv"),
        Step("energy", "matmul_usage", _runs([{"size": g(8192, 256), "precision": p}
                                              for p in g(("fp32", "fp16"), ("fp32",))], m),
             {"duration_s": g(5.0 if full else 3.0, 0.3)}, g(5.0, 0.6),
             "dense matmuls under the energy meter: fp32, then mixed precision"),
    ]
    if gpu and "tf32" in precisions:
        steps.append(Step("tf32_loss", "held_out", tuple(
            {"precision": p, **numerics, "seed": s} for p in ("fp32", "tf32") for s in SEEDS),
            {"train_steps": held_out}, 6.0,
            "held-out loss after the same steps, TF32 against IEEE fp32"))
    if gpu and not sparsity_unsupported_reason(8192, 8192, "fp16", dev):
        steps += [
            Step("energy_sparse", "sparse_usage", _runs([{"size": 8192, "precision": "fp16"}],
                                                        m),
                 {"duration_s": 5.0 if full else 3.0}, 5.0,
                 "mixed precision + 2:4 sparse under the energy meter"),
            Step("sparsity", "sparsity", _runs([
                {"m": s, "n": s, "k": s, "precision": p}
                for s in ((4096, 8192) if full else (8192,))
                for p in (("fp16", "bf16") if full else ("fp16",))], m,
                lambda p: p["m"] == 8192 and p["precision"] == "fp16"), {"budget_s": 0.3}, 4.0,
                 "dense vs 2:4-sparse matmul")]
    if gpu and m.count > 1:
        sibling = precisions if full else ["bf16" if "bf16" in precisions else "fp32"]
        steps.append(Step("siblings", "peak", tuple(
            {"device": f"cuda:{i}", "precision": p, "size": 8192}
            for i in range(m.count) if f"cuda:{i}" != dev for p in sibling),
            {"budget_s": 0.3}, 2.0, "the same on every other card, for the sibling check"))
    if not gpu or m.count > 1:
        sizes = tuple(2**e for e in range(10, 31, 2)) if full else (2**24, 2**28, 2**30)
        steps += comm_steps({"world_size": g(m.count, 2), "backend": g("nccl", "gloo")},
                            g(sizes, (2**22,)), m)
    return steps


def ddp_models(m: Machine) -> list[dict]:
    """The DDP step's models at the global batch their published training used, split into
    micro-batches that fit one card: GPT-2 small 512 sequences of 1024 tokens (Radford et al.
    2019), ResNet-50 256 images, 32 per GPU (Goyal et al. 2017) where torchvision is installed;
    on a CPU the tiny Transformer, 4 micro-batches of 16 per step."""
    if not m.gpu:
        return [{"model": "transformer", "size": "tiny", "micro_batch": 16,
                 "accum_steps": DDP_ACCUM_STEPS, "precision": "fp32"}]
    precision = "fp32" if unsupported_reason("bf16", m.device) else "bf16"
    out = []
    for model, size, micro, batch in (("transformer", "gpt2_small", 8, 512),
                                      ("resnet50", "224", 32, 256)):
        if model == "transformer" or not backends.torchvision_reason():
            out.append({"model": model, "size": size, "micro_batch": micro,
                        "accum_steps": max(1, batch // (micro * m.count)),
                        "precision": precision})
    return out


def comm_steps(ranks: dict, sizes, m: Machine) -> list[Step]:
    """The steps on `ranks`: flat and hierarchical all-reduce at `sizes` (the largest in every
    run), DDP steps of the lab's models per comm hook and sync mode at their published global
    batch, and in every run the fastest compressing hook with no_sync and plain all-reduce
    after every micro-batch timed again (the Transformer's: it decides)."""
    n, backend = ranks["world_size"], ranks["backend"]
    flat = [{"op": "all_reduce", "size_bytes": s, "dtype": "fp32", **ranks} for s in sizes]
    hier = [{"op": "hierarchical_all_reduce", "size_bytes": s, "dtype": "fp32",
             "ranks_per_node": n // 2 if n >= 4 else 1, **ranks} for s in sizes]
    hooks = ("allreduce", "fp16_compress", "powersgd")
    ddp = [(h, s) for h in hooks for s in ("no_sync", "every_micro_batch")] if m.full else [
        ("allreduce", "every_micro_batch"), ("allreduce", "no_sync"),
        ("fp16_compress", "every_micro_batch")] + [(h, "no_sync") for h in hooks[1:]]
    models = ddp_models(m)
    settings = {"budget_s": 0.3, "train_steps": 4 if m.gpu else 10}
    est = 3.0 + 40.0 / n if m.gpu else 0.6   # GPT-2 small at 512 sequences per step
    plain = {"hook": "allreduce", "sync": "every_micro_batch", **models[0], **ranks}
    return [
        Step("hierarchical", "comm", _runs(flat + hier, m,
                                           lambda p: p["size_bytes"] == max(sizes)),
             {"budget_s": 0.3}, 3.0 if m.gpu else 0.6,
             f"flat and hierarchical all-reduce over {n} ranks ({backend})", ranks=n),
        Step("ddp", "ddp", tuple({"hook": h, "sync": s, **model, **ranks}
                                 for model in models for h, s in ddp), settings, est,
             f"DDP steps of {' and '.join(x['model'] for x in models)} per comm hook and sync "
             f"mode over {n} ranks ({backend})", ranks=n),
        Step("ddp_confirm", "ddp", _runs(({CONFIRM: "ddp", "backend": backend}, plain), m),
             settings, est, "the fastest compressing hook with no_sync, and plain all-reduce "
             "after every micro-batch, timed again in each run", ranks=n, confirms="ddp",
             among=(("sync", ("no_sync",)), ("model", (models[0]["model"],)),
                    ("hook", ("fp16_compress", "bf16_compress", "powersgd")))),
    ]


# ---- what a claim needs ------------------------------------------------------------------------
def need_reason(need: str, m: Machine) -> str:
    """Why this machine lacks `need` ("" when it has it)."""
    if need == "gpu":
        return "" if m.gpu else (f"{NO_GPU}: it is a ratio of tensor-core rates or a tensor-core "
                                 "mode, and a CPU has neither")
    if need in ("tf32", "fp8"):
        return unsupported_reason(need, m.device) if m.gpu else ""
    if need == "sparsity":
        return sparsity_unsupported_reason(8192, 8192, "fp16", m.device) if m.gpu else ""
    if need == "triton":
        return backends.why_unavailable("triton") if m.gpu and not backends.HAS_TRITON else ""
    if need == "resnet50":
        if not m.gpu:
            return (f"{NO_GPU}: the claim is ResNet-50's, which trains at GPU sizes only (a CPU "
                    "step takes seconds); the Transformer's figures are shown beside")
        why = backends.torchvision_reason()
        return f"ResNet-50 comes from torchvision: {why}" if why else ""
    raise ValueError(f"unknown need {need!r}")


def plan_battery(mode: str = "quick", device: str = "cpu", gpu_count: int | None = None
                 ) -> Plan:
    """The steps of `mode` ("quick" or "full") on `device` ("cpu", or "cuda:N": the first card
    of the box, the others its siblings) and the claims it cannot test here, with why."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: use 'quick' or 'full'")
    if device != "cpu" and not device.startswith("cuda:"):
        raise ValueError(f"device {device!r}: give 'cpu' or 'cuda:N'")
    if device != "cpu" and gpu_count is None:
        import torch

        gpu_count = torch.cuda.device_count()
    m = Machine(device, 0 if device == "cpu" else gpu_count, mode == "full")
    claims = [c for c in REGISTER if c.judge]
    wanted = {s for c in claims for s in c.steps} | {"peak", "siblings"}   # + health
    steps = tuple(s for s in _steps(m) if s.name in wanted)
    untestable = {c.id: why for c in claims
                  if (why := next((r for n in c.needs if (r := need_reason(n, m))), ""))}
    if not m.gpu:
        untestable["busbw"] = f"{NO_GPU}: the health section's bus bandwidth needs 2 or more GPUs"
    elif m.count < 2:
        untestable["busbw"] = ("one GPU here: bus bandwidth needs 2 or more GPUs in this box "
                               f"(CUDA sees {m.count})")
        for c in claims:
            if {"ddp", "hierarchical"} & set(c.steps):
                untestable[c.id] = ("one GPU here: it needs 2 or more GPUs in this box (NCCL), "
                                    f"CUDA sees {m.count}; a CPU report counts the "
                                    "communication claims on 2 gloo ranks")
    return Plan(mode, device, m.count, steps, untestable)
