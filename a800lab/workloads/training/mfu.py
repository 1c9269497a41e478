"""Model FLOPs utilisation (MFU) of a training step: the FLOPs of one micro-batch's forward and
backward of a fresh eager model (torch's FlopCounterMode: matmuls, convolutions, attention; no
optimizer, no recomputation, as in the PaLM paper) times samples/s, over the peak of the step's
matmul precision: the datasheet's (None on a CPU) and the one `python -m a800lab peak` recorded.
40-60% is a good large-model training MFU on an A100/H100 (elementwise work adds no FLOPs).

    count = count_model_flops(spec, task, "cpu")   # FlopCount: per_sample, by_op (per sample)
    mfu_figures(count.per_sample, 5000.0, peaks_for("bf16", "cuda:0"))   # achieved_tflops, MFU %
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
    """One micro-batch's forward and backward of a fresh eager model, counted."""
    plain = replace(spec, checkpointing=False, compile="off", accum_steps=1)
    trainer = Trainer(plain, task, device)
    batch = trainer.batch()
    with FlopCounterMode(display=False) as counter:
        trainer.cycle([batch])  # the optimizer's kernels are no FLOPs to the counter
    by_op = {str(op): flops / spec.batch_size
             for op, flops in counter.get_flop_counts().get("Global", {}).items()}
    return FlopCount(spec.batch_size, int(counter.get_total_flops()), by_op)


def peaks_for(precision: str, device: str, env: dict | None = None) -> dict:
    """The datasheet and measured peaks (TFLOP/s, None when unknown) of a precision's matmuls
    on `device`, with the datasheet's source or why it is unknown."""
    core = matmul_precision_of(precision)
    env = env if env is not None else environment(device)
    if device.startswith("cuda"):
        datasheet, source = peak_for(torch.cuda.get_device_name(device), core)
    else:
        datasheet, source = None, CPU_PEAK_REASON
    return {"peak_precision": core, "datasheet_peak_tflops": datasheet,
            "datasheet_peak_source": source, "measured_peak_tflops": measured_peak(env, core)}


def mfu_figures(flops_per_sample: float, samples_per_s: float, peaks: dict) -> dict:
    """achieved_tflops and the MFU (%) against each of peaks_for's peaks (None for None)."""
    achieved = flops_per_sample * samples_per_s / 1e12

    def pct(peak):
        return None if not peak else 100 * achieved / peak

    return {"model_flops_per_sample": flops_per_sample, "achieved_tflops": achieved, **peaks,
            "mfu_pct_of_datasheet_peak": pct(peaks["datasheet_peak_tflops"]),
            "mfu_pct_of_measured_peak": pct(peaks["measured_peak_tflops"])}
