"""Training numerics the report asks about: the held-out loss a precision reaches after N steps
(and whether TF32 really engaged), and embedding tables stored in fp16 against fp32.

    held_out_point("tf32", device="cuda")["matmul_probe_error"]   # TF32: >> fp32's ~1e-7
    embedding_point("fp16", device="cuda")["lost_update_share"]    # embedding updates lost
"""

import math
import time
from dataclasses import replace

import torch
from torch import nn

from ...core.backends import resolve_device
from ...core.cancel import CancelToken
from ...core.checks import positive_int
from ...core.operands import make_operands
from ..models.presets import Task, preset
from .spec import TrainSpec, check_precision, precision_context
from .trainer import Trainer

EMBEDDING_DTYPES = {"fp16": torch.float16, "fp32": torch.float32}
PROBE_SIZE = 256


def matmul_probe_error(device: str) -> float:
    """Relative error vs float64 of a PROBE_SIZE^3 float32 matmul under the settings in force
    (TF32: ~1e-4..1e-3; IEEE fp32: ~1e-7): a "tf32" run that ran IEEE cannot pass for one."""
    ops = make_operands(PROBE_SIZE, PROBE_SIZE, PROBE_SIZE, "fp32", device, seed=11)
    return ops.rel_error(ops.run())


def _trained(trainer: Trainer, steps: int, cancel: CancelToken | None, last_step=None) -> dict:
    """Train `steps` steps (`last_step(trainer)` runs the last, if given); the point's result."""
    history = trainer.train(steps - (last_step is not None), cancel=cancel)
    times, losses = [1e3 * h["wall_s"] for h in history], [h["loss"] for h in history]
    if last_step is not None:
        if cancel is not None:
            cancel.raise_if_cancelled()
        start = time.perf_counter()
        losses.append(last_step(trainer))
        times.append((time.perf_counter() - start) * 1e3)   # last_step synchronises (float)
    spec = trainer.spec
    step_s = sorted(times)[len(times) // 2] / 1e3
    finite = [v if math.isfinite(v) else None for v in losses]   # JSON has no NaN
    evaluation = {k: v if v is None or math.isfinite(v) else None
                  for k, v in trainer.evaluate().items()}
    return {"throughput": spec.effective_batch / step_s, "throughput_unit": "samples/s",
            "time_ms": times, "steps_trained": len(times), "loss_curve": finite,
            "loss": finite[-1], **evaluation, "diverged": evaluation["eval_loss"] is None,
            "param_count": sum(p.numel() for p in trainer.model.parameters()),
            **({"message": f"the loss is not finite after {len(times)} steps ({spec.precision},"
                           f" {spec.optimizer}): training diverged"}
               if evaluation["eval_loss"] is None else {})}


def held_out_point(precision: str = "fp32", model: str = "transformer", size: str = "tiny",
                   batch_size: int = 32, *, train_steps: int = 60, seed: int = 0,
                   device: str = "auto", cancel: CancelToken | None = None) -> dict:
    """Train `train_steps` steps in `precision`, then the held-out loss and the TF32 probe."""
    positive_int("train_steps", train_steps, "60")
    device = resolve_device(device)
    spec = TrainSpec(model=model, size=size, batch_size=batch_size, precision=precision)
    check_precision(spec.precision, device)
    trainer = Trainer(spec, preset(model, size), device, seed=seed)
    with precision_context(spec.precision):
        out = _trained(trainer, train_steps, cancel)
        out["matmul_probe_error"] = matmul_probe_error(device)
    return out


def with_embeddings_in(task: Task, dtype: torch.dtype) -> Task:
    """`task` whose model keeps every nn.Embedding's table in `dtype` (the rest as built)."""
    make = task.make_model

    def make_model() -> nn.Module:
        model = make()
        for module in model.modules():
            if isinstance(module, nn.Embedding):
                module.to(dtype)
        return model

    return replace(task, make_model=make_model)


class Fp32State:
    """AdamW in fp32 for low-precision tables: each step steps an fp32 twin of a table's value
    and gradient and stores the result back, so only the storage rounds (an update below half
    an ulp is lost)."""

    def __init__(self, model: nn.Module, tables: list[nn.Parameter], lr: float):
        self.pairs = [(w, nn.Parameter(w.detach().float())) for w in tables
                      if w.dtype != torch.float32]
        twins = {id(w): t for w, t in self.pairs}
        self.inner = torch.optim.AdamW([twins.get(id(p), p) for p in model.parameters()
                                        if p.requires_grad], lr=lr)

    def step(self) -> None:
        for w, twin in self.pairs:
            twin.data.copy_(w.detach())
            twin.grad = None if w.grad is None else w.grad.float()
        self.inner.step()
        for w, twin in self.pairs:
            w.data.copy_(twin.detach())   # rounds: an update below half an ulp is lost

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner.zero_grad(set_to_none=set_to_none)
        for w, _ in self.pairs:
            w.grad = None


def embedding_point(embedding: str = "fp16", model: str = "transformer", size: str = "tiny",
                    batch_size: int = 32, precision: str = "fp32_default",
                    optimizer_state: str = "fp32", *, train_steps: int = 60, seed: int = 0,
                    device: str = "auto", cancel: CancelToken | None = None) -> dict:
    """Train with every nn.Embedding stored in `embedding`, the rest in `precision`; then the
    held-out loss and `lost_update_share`: of the last step's table entries with a non-zero
    gradient, the share left unchanged. optimizer_state="fp32" steps the tables with Fp32State;
    "fp16" is plain AdamW on them (`embed.half()`): g^2 and eps underflow, the loss turns NaN."""
    for name, value in (("embedding", embedding), ("optimizer_state", optimizer_state)):
        if value not in EMBEDDING_DTYPES:
            raise ValueError(f"{name}={value!r}: use one of {tuple(EMBEDDING_DTYPES)}")
    positive_int("train_steps", train_steps, "60")
    device = resolve_device(device)
    spec = TrainSpec(model=model, size=size, batch_size=batch_size, precision=precision,
                     optimizer="adamw")
    if spec.uses_scaler:
        raise ValueError("a GradScaler refuses fp16 gradients, and an fp16 embedding table has "
                         "them; train the rest in fp32_default, fp32 or bf16")
    check_precision(spec.precision, device)
    task = with_embeddings_in(preset(model, size), EMBEDDING_DTYPES[embedding])
    trainer = Trainer(spec, task, device, seed=seed)
    tables = [m.weight for m in trainer.model.modules() if isinstance(m, nn.Embedding)]
    if not tables:
        raise ValueError(f"the {model} preset has no nn.Embedding: use the transformer")
    if optimizer_state == "fp32":
        trainer.optimizer = Fp32State(trainer.model, tables, trainer.lr)
    lost = {}

    def last_step(t: Trainer) -> float:
        before = [w.detach().clone() for w in tables]
        touched = []
        loss = t.cycle(t.batches(), before_step=lambda: touched.extend(w.grad != 0 for w in tables))
        changed = sum(int(((w.detach() != b) & m).sum())
                      for w, b, m in zip(tables, before, touched, strict=True))
        updated = sum(int(m.sum()) for m in touched)
        lost["share"] = 1 - changed / updated if updated else 0.0
        return float(loss)

    with precision_context(spec.precision):
        out = _trained(trainer, train_steps, cancel, last_step=last_step)
    out.update(embedding_dtype=embedding, lost_update_share=lost["share"],
               embedding_params=sum(w.numel() for w in tables))
    return out
