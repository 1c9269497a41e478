"""A DDP training step on a live process group: comm hooks, no_sync accumulation, bucket sizes;
the traffic one optimizer step hands to all-reduce is counted, then steps are timed. The model is
a small MLP, or one of the training lab's presets (model="transformer", size="gpt2_small").

    ddp_point(hook="fp16_compress", accum_steps=4, world_size=2, backend="gloo")  # every rank
    hook_support(device="cpu")     # {"bf16_compress": "ok" or why not, ...} on this group
"""

import contextlib
import functools
import statistics
from collections import Counter
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ...core.knobs import check_knobs, knob
from ..models.presets import MODELS
from .collectives import agree, agreed_reps, check_group, timed_calls

HOOKS = ("allreduce", "fp16_compress", "bf16_compress", "powersgd")
SYNC_MODES = ("no_sync", "every_micro_batch")
CLASSES = 16
# (width, depth) of the MLP: ~0.2 M parameters (0.8 MiB of fp32 gradients) on a CPU, ~50 M
# (200 MiB) on a GPU
MODEL_SHAPE = {"cpu": (256, 3), "cuda": (4096, 3)}
POOL_BATCHES = 8  # micro-batches generated per rank and cycled while timing


@contextlib.contextmanager
def counting_all_reduce(traffic: Counter):
    """Count every torch.distributed.all_reduce call and its bytes inside the block (`traffic`'s
    "calls" and "bytes"; register_hook's hook counts "hook_calls")."""
    import torch.distributed as dist

    original = dist.all_reduce

    @functools.wraps(original)
    def counted(tensor, *args, **kwargs):
        traffic["calls"] += 1
        traffic["bytes"] += tensor.numel() * tensor.element_size()
        return original(tensor, *args, **kwargs)

    dist.all_reduce = counted
    try:
        yield traffic
    finally:
        dist.all_reduce = original


def register_hook(model, hook: str, traffic: Counter, *, powersgd_rank: int = 1,
                  start_iter: int = 2):
    """Register comm hook `hook` on a DDP model, counting its bucket calls; returns its state
    (PowerSGDState for powersgd, else None)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    state = None
    if hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None,
                                            matrix_approximation_rank=powersgd_rank,
                                            start_powerSGD_iter=start_iter, random_seed=0)
        fn = powerSGD_hook.powerSGD_hook
    else:
        fn = getattr(default_hooks, f"{hook}_hook")

    def counted(hook_state, bucket):
        traffic["hook_calls"] += 1
        return fn(hook_state, bucket)

    model.register_comm_hook(state, counted)
    return state


def build_model(device: str, width: int, depth: int) -> torch.nn.Module:
    """The MLP every rank starts from (seeded: the same weights everywhere)."""
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, CLASSES)).to(device)


def _preset_task(model: str, size: str, device: str):
    """(module, batches(micro_batch, rank, count), loss_fn, lr, held-out batch) of a training-lab
    preset: its seeded weights, its generated task, its learning rate."""
    from ..models.presets import preset

    task = preset(model, size)

    def batches(micro_batch: int, rank: int, count: int):
        gen = torch.Generator(device).manual_seed(1000 + 100 * rank)
        return [task.make_batch(micro_batch, gen) for _ in range(count)]

    return task.make_model().to(device), batches, task.loss_fn, task.lr, task.eval_batch


def make_batches(width: int, device: str, micro_batch: int, rank: int, count: int):
    """`count` micro-batches of this rank's shard of a shared task: 16 Gaussian clusters in
    `width` dimensions, label = cluster."""
    centres = torch.randn(CLASSES, width, generator=torch.Generator().manual_seed(7))
    out = []
    for i in range(count):
        gen = torch.Generator().manual_seed(1000 + 100 * rank + i)
        labels = torch.randint(0, CLASSES, (micro_batch,), generator=gen)
        inputs = centres[labels] + torch.randn(micro_batch, width, generator=gen)
        out.append((inputs.to(device), labels.to(device)))
    return out


@dataclass(frozen=True)
class DDPSpec:
    """One DDP point's parameters, each checked by its declaration (core.knobs). `model`: "mlp"
    (SGD at the point's lr), or a training-lab preset at `size` (AdamW at the preset's own
    rate); precision "bf16": forward under bf16 autocast (weights and gradients stay fp32)."""

    hook: str = knob("allreduce", "DDP's comm hook", choices=HOOKS)
    accum_steps: int = knob(1, "micro-batches per optimizer step", integer=True, lo=1,
                            scale="pow2", panel_hi=16)
    sync: str = knob("no_sync", "all-reduce once per step or per micro-batch", choices=SYNC_MODES)
    bucket_cap_mb: float = knob(25.0, "DDP's gradient bucket size", unit="MB", lo=0)
    powersgd_rank: int = knob(1, "PowerSGD's matrix approximation rank", integer=True, lo=1,
                              scale="pow2", panel_hi=16)
    start_iter: int = knob(2, "PowerSGD's plain all-reduce steps first (error feedback needs 2)",
                           integer=True, lo=2, panel_hi=1000)
    micro_batch: int = knob(32, "micro-batch per rank", unit="samples", integer=True, lo=1)
    model: str = knob("mlp", "the model", choices=MODELS, named=True)
    size: str = ""  # a preset's size (checked against the model's sizes)
    precision: str = knob("fp32", "the forward's precision", choices=("fp32", "bf16"))

    def __post_init__(self):
        check_knobs(self)
        if self.model != "mlp":
            from ..models.presets import sizes_of

            if self.size not in sizes_of(self.model):
                raise ValueError(f"size={self.size!r} for model {self.model!r}: use one of "
                                 f"{sizes_of(self.model)}")


def ddp_point(*, world_size: int, backend: str, nodes: int = 1, device: str = "cpu",
              train_steps: int = 20, budget_s: float = 0.3, lr: float = 0.1, **params) -> dict:
    """One DDP configuration (DDPSpec's fields, checked by runs.check_point): train, count one
    step's traffic, time steps; throughput = micro_batch x accum_steps x world_size / step
    time."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    check_group(world_size, backend, nodes)
    spec = DDPSpec(**params)
    accum_steps, sync, micro_batch, model = spec.accum_steps, spec.sync, spec.micro_batch, \
        spec.model
    if model == "mlp":
        width, depth = MODEL_SHAPE["cuda" if device.startswith("cuda") else "cpu"]
        module, loss_fn, eval_batch = build_model(device, width, depth), F.cross_entropy, 256
        batches_of = functools.partial(make_batches, width, device)
    else:
        module, batches_of, loss_fn, lr, eval_batch = _preset_task(model, spec.size, device)
    ids = [torch.device(device).index or 0] if device.startswith("cuda") else None
    ddp = DDP(module, device_ids=ids, bucket_cap_mb=spec.bucket_cap_mb)
    traffic = Counter()
    state = register_hook(ddp, spec.hook, traffic, powersgd_rank=spec.powersgd_rank,
                          start_iter=spec.start_iter)
    optimizer = (torch.optim.SGD(ddp.parameters(), lr=lr, momentum=0.9) if model == "mlp"
                 else torch.optim.AdamW(ddp.parameters(), lr=lr))
    batches = batches_of(micro_batch, dist.get_rank(), POOL_BATCHES)
    cursor = [0]
    autocast = (functools.partial(torch.autocast, torch.device(device).type, torch.bfloat16)
                if spec.precision == "bf16" else contextlib.nullcontext)

    def optimizer_step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        for i in range(accum_steps):
            x, y = batches[cursor[0] % len(batches)]
            cursor[0] += 1
            quiet = sync == "no_sync" and i < accum_steps - 1
            with ddp.no_sync() if quiet else contextlib.nullcontext():
                with autocast():
                    loss = loss_fn(ddp(x), y) / accum_steps
                loss.backward()
        optimizer.step()
        return loss

    for _ in range(train_steps):
        optimizer_step()
    eval_x, eval_y = batches_of(eval_batch, -1, 1)[0]
    with torch.no_grad(), autocast():
        eval_loss = loss_fn(module(eval_x), eval_y).float().item()
    traffic.clear()
    with counting_all_reduce(traffic):
        optimizer_step()
    counted = traffic.copy()  # before agree() below all-reduces anything itself
    syncs = 1 if sync == "no_sync" else accum_steps
    samples = timed_calls(optimizer_step, device, agreed_reps(optimizer_step, device, budget_s))
    step_ms = statistics.median(samples)
    grad_bytes = sum(p.numel() * p.element_size() for p in module.parameters())
    result = {
        "throughput": micro_batch * accum_steps * world_size / (step_ms / 1e3),
        "throughput_unit": "samples/s", "time_ms": samples, "eval_loss": eval_loss,
        "bytes_per_step": counted["bytes"], "allreduce_calls_per_step": counted["calls"],
        # per training sample this rank processed: what accumulation with no_sync divides
        "bytes_per_sample": counted["bytes"] / (micro_batch * accum_steps),
        "allreduce_calls_per_sample": counted["calls"] / (micro_batch * accum_steps),
        "syncs_per_step": syncs, "buckets": counted["hook_calls"] // syncs,
        "grad_bytes": grad_bytes, "param_count": grad_bytes // 4,
        "global_batch": micro_batch * accum_steps * world_size,
        "sent_vs_fp32": counted["bytes"] / (grad_bytes * syncs),
        "loss_agrees": agree(eval_loss, device, "max") - agree(eval_loss, device, "min") < 1e-4,
    }
    if state is not None:  # PowerSGD: were the timed steps compressed yet?
        result["compressed"] = state.iter >= state.start_powerSGD_iter
    return result


def hook_support(device: str = "cpu") -> dict[str, str]:
    """Each hook on this group: "ok", or the error one DDP step with it raised (every rank)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    out = {}
    for hook in HOOKS:
        torch.manual_seed(0)
        module = torch.nn.Linear(64, 64).to(device)
        ids = [torch.device(device).index or 0] if device.startswith("cuda") else None
        model = DDP(module, device_ids=ids)
        register_hook(model, hook, Counter(), start_iter=2)
        try:
            for _ in range(3):  # past PowerSGD's start_iter: its compressed path runs too
                model(torch.randn(8, 64, device=device)).sum().backward()
            out[hook] = "ok"
        except Exception as exc:  # noqa: BLE001 -- the reason is the answer
            out[hook] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"
    return out
