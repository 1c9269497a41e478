"""The training lab's sweep points: train, count, then time one configuration, with its model
FLOPs utilisation (FlopCounterMode's FLOPs x samples/s over the datasheet and measured peaks).

    point = train_point(model="mlp", batch_size=32, accum_steps=2, precision="fp32")
    point["throughput"], point["loss"], point["mfu_pct_of_datasheet_peak"]   # samples/s, ...
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch.utils.flop_counter import FlopCounterMode

from ...core.backends import resolve_device
from ...core.cancel import CancelToken
from ...core.checks import positive_int
from ...core.environment import environment
from ...core.memory import free_after_oom
from ...core.specs import peak_for
from ...core.timing import measure
from ..models.presets import Task, preset
from ..peak import measured_peak
from .memory import StepMemory, fit_memory_model, prediction_error
from .spec import TrainSpec, check_precision, matmul_precision_of, precision_context
from .trainer import Trainer, accumulation_gaps, check_levers, measure_step_memory

DEFAULT_TRAIN_STEPS = 30
CPU_PEAK_REASON = "CPUs are not in the datasheet table"


@dataclass(frozen=True)
class FlopCount:
    """FLOPs of one micro-batch's forward and backward, in total and per sample (by op)."""

    batch_size: int
    total_flops: int
    by_op: dict  # op name -> FLOPs per sample

    @property
    def per_sample(self) -> float:
        return self.total_flops / self.batch_size


def count_model_flops(spec: TrainSpec, task: Task, device: str) -> FlopCount:
    """One micro-batch's forward and backward of a fresh eager model, counted."""
    plain = replace(spec, checkpointing=False, compile="off", accum_steps=1)
    trainer = Trainer(plain, task, device)
    batch = trainer.batch()
    with FlopCounterMode(display=False) as counter:
        trainer.cycle([batch])  # the optimizer's kernels are no FLOPs to the counter
    by_op = {str(op): flops / spec.batch_size
             for op, flops in counter.get_flop_counts().get("Global", {}).items()}
    return FlopCount(spec.batch_size, int(counter.get_total_flops()), by_op)


def peaks_for(precision: str, device: str) -> dict:
    """The datasheet and measured peaks (TFLOP/s, or None) of a precision's matmuls."""
    core = matmul_precision_of(precision)
    if device.startswith("cuda"):
        datasheet, source = peak_for(torch.cuda.get_device_name(device), core)
    else:
        datasheet, source = None, CPU_PEAK_REASON
    return {"peak_precision": core, "datasheet_peak_tflops": datasheet,
            "datasheet_peak_source": source,
            "measured_peak_tflops": measured_peak(environment(device), core)}


def mfu_figures(flops_per_sample: float, samples_per_s: float, peaks: dict) -> dict:
    """achieved_tflops and the MFU (%) against each of peaks_for's peaks (None for None)."""
    achieved = flops_per_sample * samples_per_s / 1e12

    def pct(peak):
        return None if not peak else 100 * achieved / peak

    return {"model_flops_per_sample": flops_per_sample, "achieved_tflops": achieved, **peaks,
            "mfu_pct_of_datasheet_peak": pct(peaks["datasheet_peak_tflops"]),
            "mfu_pct_of_measured_peak": pct(peaks["measured_peak_tflops"])}

PROBE_CYCLES = 2  # the optimizer's first step creates its state; the second runs with it


def fit_from_probes(spec: TrainSpec, task: Task, device: str, batches: Sequence[int]):
    """A MemoryModel fitted to probes of a fresh model at each micro-batch in `batches`."""
    # accumulation of 2 or more keeps the gradients through the next forward: 2 tells it all
    accum = min(spec.accum_steps, 2)
    probes = [(b, measure_step_memory(replace(spec, batch_size=b, accum_steps=accum), task,
                                      device, cycles=PROBE_CYCLES)) for b in batches]
    return fit_memory_model(probes, grads_in_forward=accum > 1)


def train_point(*, task: Task | None = None, train_steps: int = DEFAULT_TRAIN_STEPS,
                budget_s: float = 0.3, predict_memory: bool = True, device: str = "auto",
                seed: int = 0, cancel: CancelToken | None = None, **fields) -> dict:
    """Probes fit a memory model; a fresh model of `task` (else the preset `model` at `size`)
    trains `train_steps` steps (the loss curve); one cycle is counted (the memory breakdown), a
    held-out batch scored, then cycles on a fixed pool timed: samples/s, memory, loss, MFU.
    `fields`: TrainSpec's (batch_size=32, precision="bf16", ...; model: ignored with a task)."""
    spec = TrainSpec(**{**fields, **({"model": task.name} if task is not None else {})})
    positive_int("train_steps", train_steps, str(DEFAULT_TRAIN_STEPS))
    device = resolve_device(device)
    check_precision(spec.precision, device)
    task = task or preset(spec.model, spec.size)
    check_levers(spec, task, device)
    if cancel is not None:
        cancel.raise_if_cancelled()
    with precision_context(spec.precision):
        predicted = None
        if predict_memory:  # before the model below exists: the probes never add to its peak
            half = max(2, spec.batch_size // 2)  # probes at b/4 and b/2 (at least 1 and 2)
            memory_model = fit_from_probes(spec, task, device, (max(1, half // 2), half))
            predicted = memory_model.predict(spec.batch_size)
            free_after_oom()  # the probes' models are gone: hand their blocks back
        flops = count_model_flops(spec, task, device)  # a fresh eager model, freed after
        base_bytes = torch.cuda.memory_allocated(device) if device.startswith("cuda") else 0
        trainer = Trainer(spec, task, device, seed=seed)
        history = trainer.train(train_steps, cancel=cancel)  # the first compiles, if anything
        pool = trainer.pool()
        breakdown = trainer.counted_cycle(pool, StepMemory(device, base_bytes=base_bytes))
        evaluation = trainer.evaluate()
        timing = measure(lambda: trainer.cycle(pool), device=device, budget_s=budget_s,
                         cancel=cancel)
    step_s = timing.median_ms / 1e3
    out = {"throughput": spec.effective_batch / step_s, "throughput_unit": "samples/s",
           "timing": timing, "optimizer_steps_per_s": 1.0 / step_s,
           "effective_batch": spec.effective_batch, "loss": history[-1]["loss"], **evaluation,
           "loss_curve": [h["loss"] for h in history],
           "skipped_steps": sum(h["skipped"] for h in history), "scale": history[-1]["scale"],
           "scale_curve": [h["scale"] for h in history] if spec.uses_scaler else [],
           "param_count": sum(p.numel() for p in trainer.model.parameters()),
           **{k: v for k, v in breakdown.to_dict().items() if k not in ("peak_bytes", "meter")},
           "step_peak_bytes": breakdown.peak_bytes, "memory_meter": breakdown.meter,
           "predicted_peak_bytes": predicted, "prediction_error": None if predicted is None
           else prediction_error(predicted, breakdown.peak_bytes),
           **mfu_figures(flops.per_sample, spec.effective_batch / step_s,
                         peaks_for(spec.precision, device)),
           "model_flops_by_op": flops.by_op,
           **trainer.compiling.metrics([h["wall_s"] for h in history])}
    if not math.isfinite(history[-1]["loss"]):
        out["message"] = ("the loss is not finite after training: this precision diverged "
                          "(try a GradScaler, bf16, or a lower lr)")
    return out


def accumulation_point(model: str, size: str, batch_size: int, accum_steps: int,
                       precision: str = "fp32", *, device: str = "cpu", train_steps: int = 5,
                       budget_s: float = 0.3, cancel: CancelToken | None = None) -> dict:
    """train_point, plus with accumulation trainer.accumulation_gaps."""
    out = train_point(model=model, size=size, batch_size=batch_size, accum_steps=accum_steps,
                      precision=precision, device=device, train_steps=train_steps,
                      budget_s=budget_s, predict_memory=False, cancel=cancel)
    if accum_steps > 1:
        out.update(accumulation_gaps(preset(model, size), batch_size, accum_steps, device=device))
    return out
