"""Utilisation, energy and cost of a workload run steadily under an EnergyMeter: samples/s, GPU
utilisation, power, joules per sample and cost per million samples.

    point = metered_run(step, samples_per_step=256, device="cuda")   # a sweep point's result
    cost_per_million_samples_usd(point["throughput"], price_per_gpu_hour_usd=2.5)
"""

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
import torch

from ..core.backends import resolve_device
from ..core.cancel import CancelToken
from ..core.checks import positive_float, positive_int
from ..core.knobs import check_knobs, knob, knobs
from ..core.memory import check_fits
from ..core.operands import make_operands, needed_bytes
from ..core.precision import check_supported, matmul_precision, parse_precision
from ..core.window import timed_section
from .energy import EnergyMeter
from .matmul import MatmulSpec
from .training.spec import precision_context

GPU_DURATION_S, GPU_WARMUP_S = 5.0, 1.0
CPU_DURATION_S, CPU_WARMUP_S = 0.5, 0.1
CHUNKS = 20          # the run is timed in about this many chunks (their spread is the IQR)
MIN_CHUNKS = 3
J_PER_KWH = 3.6e6


@dataclass(frozen=True)
class CostSpec:
    """What the cost lab's points are priced at and metered for (a CPU run prices machines,
    not GPUs), each checked by its declaration (core.knobs)."""

    price_per_gpu_hour_usd: float = knob(2.0, "US dollars per GPU-hour", lo=0, hi=10_000)
    gpus: int = knob(1, "GPUs the job holds, each paid for", integer=True, lo=1, example="8")
    price_per_kwh_usd: float = knob(0.0, "US dollars per kWh (0: left out)", lo=0, hi=100)
    duration_s: float | None = knob(None, "each point's metered time, s", lo=0, example="5")

    def __post_init__(self):
        check_knobs(self)


def cost_per_million_samples_usd(samples_per_s: float, price_per_gpu_hour_usd: float,
                                 gpus: int = 1) -> float:
    """What a million samples cost at `price_per_gpu_hour_usd` for each of `gpus` GPUs."""
    rate = positive_float("samples_per_s", samples_per_s, "1200")
    CostSpec(price_per_gpu_hour_usd=price_per_gpu_hour_usd, gpus=gpus)
    return price_per_gpu_hour_usd * gpus / (rate * 3600.0) * 1e6


def energy_cost_per_million_samples_usd(j_per_sample: float, price_per_kwh_usd: float) -> float:
    """Electricity for a million samples at `j_per_sample` joules each."""
    energy = positive_float("j_per_sample", j_per_sample, "0.5")
    CostSpec(price_per_kwh_usd=price_per_kwh_usd)
    return energy * 1e6 / J_PER_KWH * price_per_kwh_usd


def metered_run(step: Callable[[], object], samples_per_step: int, *, device: str = "auto",
                duration_s: float | None = None, warmup_s: float | None = None,
                sample_unit: str = "samples", cancel: CancelToken | None = None,
                meter: EnergyMeter | None = None) -> dict:
    """Run `step()` steadily for `duration_s` under an EnergyMeter (`meter`: a ready one, e.g.
    with a fake NVML); a sweep point's result."""
    positive_int("samples_per_step", samples_per_step)
    device = resolve_device(device)
    on_gpu = device.startswith("cuda")
    duration_s = knobs(CostSpec)["duration_s"].check(
        "duration_s", duration_s or (GPU_DURATION_S if on_gpu else CPU_DURATION_S))
    warmup_s = warmup_s if warmup_s is not None else (GPU_WARMUP_S if on_gpu else CPU_WARMUP_S)
    sync = (lambda: torch.cuda.synchronize(device)) if on_gpu else (lambda: None)
    meter = meter or EnergyMeter(device)
    with timed_section():  # the point's measured window: warm-up and the metered steps
        t0, warm = time.perf_counter(), 0
        while warm < 2 or time.perf_counter() - t0 < warmup_s:
            if cancel is not None:
                cancel.raise_if_cancelled()
            step()
            sync()
            warm += 1
        per_step_s = (time.perf_counter() - t0) / warm
        chunk = max(1, round(duration_s / CHUNKS / per_step_s))
        chunk_ms, steps = [], 0
        with meter:
            start = time.perf_counter()
            while len(chunk_ms) < MIN_CHUNKS or time.perf_counter() - start < duration_s:
                if cancel is not None:
                    cancel.raise_if_cancelled()
                c0 = time.perf_counter()
                for _ in range(chunk):
                    step()
                sync()
                chunk_ms.append((time.perf_counter() - c0) * 1e3 / chunk)
                steps += chunk
            elapsed_s = time.perf_counter() - start
    reading = meter.reading()
    samples = steps * samples_per_step
    rate = samples / elapsed_s
    power_w = reading.power_w
    telemetry = reading.telemetry or {}

    def mean(key: str):
        return (telemetry.get(key) or {}).get("mean")

    return {
        "throughput": rate, "throughput_unit": f"{sample_unit}/s", "time_ms": chunk_ms,
        "sample_unit": sample_unit, "samples_per_step": samples_per_step, "steps": steps,
        "samples": samples, "metered_s": elapsed_s, "steps_per_chunk": chunk,
        "energy_j": reading.energy_j, "energy_source": reading.source,
        "energy_note": reading.note, "power_w": power_w,
        "power_w_samples": meter.power_samples_w,   # the spread of power is theirs
        "j_per_sample": None if power_w is None else power_w / rate,
        "cpu_time_s": reading.cpu_time_s,
        "cpu_ms_per_sample": reading.cpu_time_s * 1e3 / samples,
        "cpu_busy_cores": reading.cpu_time_s / reading.duration_s if reading.duration_s else None,
        "gpu_util_pct": mean("gpu_util_pct"), "sm_clock_mhz": mean("sm_clock_mhz"),
        "mem_used_bytes": (telemetry.get("mem_used_bytes") or {}).get("max"),
        "power_source": telemetry.get("power_source"),
        "throttle_reasons": telemetry.get("throttle_reasons"),
        "telemetry": reading.telemetry,
    }


def matmul_usage_point(size: int, precision: str = "fp32", *, device: str = "auto",
                       duration_s: float | None = None,
                       cancel: CancelToken | None = None) -> dict:
    """A size^3 matmul, checked against float64, then metered; one sample = one matmul."""
    spec = MatmulSpec(size, size, size, precision)
    prec = parse_precision(spec.precision)
    device = resolve_device(device)
    check_supported(prec, device)
    check_fits(needed_bytes(size, size, size, prec), device, what=f"a {size}^3 {prec.name} matmul")
    ops = make_operands(size, size, size, prec, device)
    with matmul_precision(prec):
        rel_error = ops.rel_error(ops.run())
        if not rel_error <= prec.rtol:
            return {"outcome": "wrong", "rel_error": rel_error,
                    "message": f"relative error {rel_error:.3g} vs float64 exceeds "
                               f"{prec.rtol:g}; not metered"}
        result = metered_run(ops.run, 1, device=device, duration_s=duration_s,
                             sample_unit="matmuls", cancel=cancel)
    return _per_flop(result, spec.flop_count, rel_error)


def _per_flop(result: dict, flop_count: int, rel_error: float) -> dict:
    j, tera = result["j_per_sample"], flop_count / 1e12
    result.update(rel_error=rel_error, flop_count=flop_count,
                  tflops=tera * result["throughput"],
                  j_per_tflop=None if j is None else j / tera,
                  cpu_s_per_tflop=result["cpu_ms_per_sample"] / 1e3 / tera)
    return result


def sparse_usage_point(size: int, precision: str = "fp16", *, device: str = "auto",
                       duration_s: float | None = None,
                       cancel: CancelToken | None = None) -> dict:
    """A size^3 2:4-sparse matmul, checked against float64, then metered; FLOPs counted dense,
    so J per TFLOP compares with matmul_usage_point's."""
    from .sparsity import backend_name, sparse_operands

    device = resolve_device(device)
    prec = parse_precision(precision)
    _, a_sparse, b, errors = sparse_operands(size, size, size, prec.name, device)
    if not errors["sparse"] <= prec.rtol:
        return {"outcome": "wrong", "rel_error": errors["sparse"],
                "message": f"2:4-sparse relative error {errors['sparse']:.3g} vs float64 "
                           f"exceeds {prec.rtol:g}; not metered"}
    result = metered_run(lambda: a_sparse @ b, 1, device=device, duration_s=duration_s,
                         sample_unit="matmuls", cancel=cancel)
    result["backend"] = backend_name()
    return _per_flop(result, 2 * size**3, errors["sparse"])


def train_usage_point(model: str = "mlp", size: str = "tiny", batch_size: int = 32,
                      precision: str = "fp32", *, device: str = "auto",
                      duration_s: float | None = None,
                      cancel: CancelToken | None = None) -> dict:
    """Optimizer steps of a training preset, metered; one sample = one training sample."""
    from .models.presets import preset
    from .training.spec import TrainSpec, check_precision
    from .training.trainer import Trainer

    spec = TrainSpec(model=model, size=size, batch_size=batch_size, precision=precision)
    device = resolve_device(device)
    check_precision(spec.precision, device)
    trainer = Trainer(spec, preset(spec.model, spec.size), device)
    pool = trainer.batches(1)
    with precision_context(spec.precision):
        result = metered_run(lambda: trainer.cycle(pool), spec.batch_size, device=device,
                             duration_s=duration_s, cancel=cancel)
    result["loss"] = float(trainer.cycle(pool))
    return result


def custom_usage_point(make_step: Callable, params: dict, *, device: str = "auto",
                duration_s: float | None = None, cancel: CancelToken | None = None) -> dict:
    """Your own workload: `make_step(**params)` (given `device=` if it takes it) returns
    (step, samples_per_step), then metered."""
    import inspect

    device = resolve_device(device)
    takes_device = "device" in inspect.signature(make_step).parameters
    made = make_step(**params, **({"device": device} if takes_device else {}))
    if not (isinstance(made, tuple) and len(made) == 2 and callable(made[0])):
        raise ValueError(f"make_step must return (step, samples_per_step), got {made!r}")
    step, samples_per_step = made
    return metered_run(step, samples_per_step, device=device, duration_s=duration_s,
                       cancel=cancel)


def compare_usage(df: pd.DataFrame, price_per_gpu_hour_usd: float, *, params=None,
                  gpus: int = 1, price_per_kwh_usd: float | None = None) -> pd.DataFrame:
    """One row per ok metered point: its params, samples/s, J/sample, CPU ms per sample,
    GPU utilisation, power, cost per million samples, and ratios to the first row."""
    ok = (df[df["outcome"] == "ok"] if "outcome" in df else df).reset_index(drop=True)
    params = list(params) if params is not None else [
        c for c in ok.columns if c in ("model", "size", "batch_size", "precision")]
    out = ok[params].copy()
    rate = pd.to_numeric(ok["throughput"], errors="coerce")
    out["throughput"] = rate
    out["unit"] = ok["throughput_unit"]
    energy = pd.to_numeric(ok["j_per_sample"], errors="coerce") if "j_per_sample" in ok \
        else pd.Series(math.nan, index=out.index)
    out["j_per_sample"] = energy
    out["energy_source"] = ok["energy_source"] if "energy_source" in ok else "unavailable"
    for column in ("cpu_ms_per_sample", "gpu_util_pct", "power_w"):
        if column in ok:
            out[column] = pd.to_numeric(ok[column], errors="coerce")
    out["cost_per_million_usd"] = [cost_per_million_samples_usd(r, price_per_gpu_hour_usd, gpus)
                                   for r in rate]
    if price_per_kwh_usd is not None:
        out["energy_cost_per_million_usd"] = [
            math.nan if not e > 0 else energy_cost_per_million_samples_usd(e, price_per_kwh_usd)
            for e in energy]
    for column in ("throughput", "j_per_sample", "cost_per_million_usd"):
        first = out[column].iloc[0] if len(out) else math.nan
        out[f"{column}_vs_first"] = out[column] / first
    return out
