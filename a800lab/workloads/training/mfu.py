"""Model FLOPs utilisation (MFU) of a training step: the model's FLOPs per sample, counted by
torch's own FlopCounterMode, times samples/s, over the card's peak for the step's precision.

    from a800lab.workloads.training.mfu import count_model_flops, mfu_figures
    count = count_model_flops(spec, task, "cpu")   # FlopCount: per_sample, by_op (per sample)
    mfu_figures(count.per_sample, samples_per_s=5000.0, precision="bf16", device="cuda:0")
    # {"model_flops_per_sample": ..., "achieved_tflops": ..., "datasheet_peak_tflops": 312.0,
    #  "mfu_pct_of_datasheet_peak": 41.2, "measured_peak_tflops": ..., ...}

What counts: one micro-batch's forward and backward of a fresh eager model at the spec's
micro-batch, as torch.utils.flop_counter.FlopCounterMode counts them (matmuls, convolutions,
attention; elementwise work, normalisation and the optimizer step are not FLOPs to it, as in
the PaLM paper's MFU). Activation checkpointing's recomputed forward is not counted (that
would be hardware FLOPs utilisation), nor is compilation: MFU is a property of the model and
the rate, whatever the kernels. The peaks are those of the step's matmul precision (bf16_pure:
bf16): the datasheet's dense figure (a800lab.core.specs.peak_for; None on a CPU or an unknown
card) and the one `python -m a800lab peak` recorded for this environment (None until then).

Why a training step's MFU is far below a matmul's "92% of peak": the step also runs
elementwise kernels, normalisation, the optimizer and launch gaps, none of which add FLOPs;
40-60% MFU is a good large-model training figure on an A100/H100.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch.utils.flop_counter import FlopCounterMode

from ...core.environment import environment
from ...core.specs import peak_for
from ..peak import measured_peak
from .models import Task
from .spec import TrainSpec, matmul_precision_of
from .trainer import Trainer

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
    """Count one micro-batch's forward and backward of a fresh model (eager, no checkpointing,
    no accumulation) with FlopCounterMode; see the module docstring."""
    plain = replace(spec, checkpointing=False, compile="off", accum_steps=1)
    trainer = Trainer(plain, task, device)
    batch = trainer.batch()
    with FlopCounterMode(display=False) as counter:
        trainer.cycle([batch])  # the optimizer's kernels are no FLOPs to the counter
    by_op = {str(op): flops / spec.batch_size
             for op, flops in counter.get_flop_counts().get("Global", {}).items()}
    return FlopCount(spec.batch_size, int(counter.get_total_flops()), by_op)


def peaks_for(precision: str, device: str, env: dict | None = None) -> dict:
    """The datasheet and measured peaks (TFLOP/s) of a training precision's matmuls on
    `device`, each None when unknown, with the datasheet's source or why it is unknown."""
    core = matmul_precision_of(precision)
    env = env if env is not None else environment(device)
    if device.startswith("cuda"):
        datasheet, source = peak_for(torch.cuda.get_device_name(device), core)
    else:
        datasheet, source = None, CPU_PEAK_REASON
    return {"peak_precision": core, "datasheet_peak_tflops": datasheet,
            "datasheet_peak_source": source, "measured_peak_tflops": measured_peak(env, core)}


def mfu_figures(flops_per_sample: float, samples_per_s: float, peaks: dict) -> dict:
    """achieved_tflops = flops_per_sample x samples_per_s / 1e12, and MFU as a percentage of
    each peak in `peaks` (peaks_for's dict; a None peak gives a None MFU)."""
    achieved = flops_per_sample * samples_per_s / 1e12

    def pct(peak):
        return None if not peak else 100 * achieved / peak

    return {"model_flops_per_sample": flops_per_sample, "achieved_tflops": achieved, **peaks,
            "mfu_pct_of_datasheet_peak": pct(peaks["datasheet_peak_tflops"]),
            "mfu_pct_of_measured_peak": pct(peaks["measured_peak_tflops"])}
