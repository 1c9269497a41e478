"""Memory model error vs measurement over micro-batch sizes.

    python benchmarks/bench_memory_model.py [--model transformer] [--size small] \
        [--precision fp32 bf16] [--batch-size 8 16 32 64 128] [--device auto]

For each precision the model (a800lab.workloads.training.memory) is fitted to two cheap probes
(micro-batches 2 and 4, two optimizer steps each, as the finder's probes) and asked for the
peak at every batch size; each batch size is then measured: three full optimizer steps of a
fresh model (the optimizer's first included). Measured is, on a GPU, the caching allocator's
peak of live tensors (target: within 10%); on a CPU, the counted peak the model is built from
(error 0 by construction: it checks the arithmetic) and the process's resident-set peak
(allocator, one-time initialisation and buffers the counts do not see: the honest CPU figure).
Prints JSON; a benchmark run by hand, not a test.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from a800lab.core.backends import resolve_device
from a800lab.core.memory import free_after_oom, probe_for
from a800lab.core.noise import default_cpu_threads
from a800lab.core.units import MIB
from a800lab.workloads.models.presets import default_size, preset
from a800lab.workloads.training.point import fit_from_probes
from a800lab.workloads.training.spec import TrainSpec
from a800lab.workloads.training.trainer import measure_step_memory

PROBES = (2, 4)


def _rss_peak(spec: TrainSpec, task, device: str) -> tuple[object, int | None]:
    """The step's breakdown and, on a CPU, the resident-set peak above the start (3 steps)."""
    probe = probe_for(device)
    base = probe.current_bytes() if not probe.on_cuda else None
    windowed = not probe.on_cuda and probe.reset_peak()
    breakdown = measure_step_memory(spec, task, device, cycles=3)
    rss = probe.peak_bytes() - base if windowed and base is not None else None
    return breakdown, rss


def _error(predicted: float, measured: float | None) -> float | None:
    return None if not measured else (predicted - measured) / measured


def run(model: str = "transformer", size: str | None = None, precisions=("fp32", "bf16"),
        batch_sizes=(8, 16, 32, 64, 128), accum_steps: int = 1, device: str = "auto") -> dict:
    device = resolve_device(device)
    size = size or ("small" if device == "cpu" else default_size(device))
    task = preset(model, size)
    measure_step_memory(TrainSpec(model=model, size=size, batch_size=2), task, device)  # warm-up
    out = {"device": device, "model": model, "size": size, "accum_steps": accum_steps,
           "torch_threads": torch.get_num_threads(), "probes": list(PROBES), "precisions": {}}
    for precision in precisions:
        spec = TrainSpec(model=model, size=size, precision=precision, accum_steps=accum_steps)
        started = time.perf_counter()
        memory_model = fit_from_probes(spec, task, device, PROBES)
        fit_s = time.perf_counter() - started
        rows = []
        for batch in batch_sizes:
            free_after_oom()
            breakdown, rss = _rss_peak(TrainSpec(model=model, size=size, precision=precision,
                                                 batch_size=batch, accum_steps=accum_steps),
                                       task, device)
            predicted = memory_model.predict(batch)
            rows.append({"batch_size": batch, "predicted_mib": predicted / MIB,
                         "measured_mib": breakdown.peak_bytes / MIB, "meter": breakdown.meter,
                         "error": _error(predicted, breakdown.peak_bytes),
                         "rss_mib": None if rss is None else rss / MIB,
                         "error_vs_rss": _error(predicted, rss)})
        errors = [abs(r["error"]) for r in rows if r["error"] is not None]
        rss_errors = [abs(r["error_vs_rss"]) for r in rows if r["error_vs_rss"] is not None]
        out["precisions"][precision] = {
            "fit_s": fit_s, "per_sample_mib": memory_model.per_sample_bytes / MIB,
            "static_mib": memory_model.static_bytes / MIB, "rows": rows,
            "max_abs_error": max(errors, default=None),
            "max_abs_error_vs_rss": max(rss_errors, default=None),
            "max_abs_error_vs_rss_from_32": max(
                (abs(r["error_vs_rss"]) for r in rows
                 if r["error_vs_rss"] is not None and r["batch_size"] >= 32), default=None)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="transformer")
    parser.add_argument("--size", default=None)
    parser.add_argument("--precision", nargs="+", default=["fp32", "bf16"])
    parser.add_argument("--batch-size", type=int, nargs="+", default=[8, 16, 32, 64, 128])
    parser.add_argument("--accum-steps", type=int, default=1)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    if resolve_device(args.device) == "cpu":
        torch.set_num_threads(default_cpu_threads())
    print(json.dumps(run(args.model, args.size, args.precision, args.batch_size,
                         args.accum_steps, args.device), indent=2))


if __name__ == "__main__":
    main()
