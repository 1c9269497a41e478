"""Sweeps: run a point function over a grid of named axes, one result record per point.

    def point(m, precision):                       # any function of the axis values
        return {"throughput": tflops, "throughput_unit": "TFLOP/s", "timing": t}
    res = run_sweep(point, {"m": [256, 512], "precision": ["fp32"]}, workload="matmul",
                    out="runs.jsonl", on_progress=lambda done, total, eta_s: ...)

A point function returns a mapping. Recognised keys: `throughput` (a positive number; or name
another key with `throughput_key=`), `throughput_unit`, `timing` (a Timing) or `time_ms`
(samples), `outcome` ("ok" or "wrong"), `message`, `memory` (dict), `telemetry` (dict); every
other key is stored as a metric. Each point is appended to `out` as soon as it is measured; with
`resume=True` points already in the file for the same environment are skipped ("error" points are
retried). An out-of-memory error becomes an "oom" record with memory freed; any other exception
an "error" record with its message; the sweep goes on. Cancelling stops after the current point.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .backends import HAS_NVML, resolve_device
from .cancel import Cancelled, CancelToken
from .environment import environment, fingerprint
from .memory import free_after_oom, is_oom, read_memory, reset_peak
from .results import (
    Record,
    append_record,
    check_param_names,
    is_positive_number,
    read_records,
)
from .timing import Timing

_RESULT_KEYS = ("throughput", "throughput_unit", "timing", "time_ms", "outcome", "message",
                "memory", "telemetry")


@dataclass
class SweepResult:
    """What a sweep produced: new records, how many points were skipped, whether it was stopped."""

    records: list[Record] = field(default_factory=list)
    skipped: int = 0
    cancelled: bool = False
    total: int = 0


def grid(axes: Mapping[str, Sequence]) -> list[dict]:
    """Cartesian product of the named axes, in axis order (the last axis varies fastest)."""
    if not axes:
        raise ValueError("the sweep has no axes; give at least one, e.g. {'m': [256, 512]}")
    for name, values in axes.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            raise ValueError(f"axis {name!r} needs a list of values, got {values!r}")
        if len(values) == 0:
            raise ValueError(f"axis {name!r} has no values; give at least one")
    names = list(axes)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*axes.values())]


def run_sweep(
    point_fn: Callable[..., Mapping],
    axes: Mapping[str, Sequence],
    *,
    workload: str = "custom",
    fixed: Mapping | None = None,
    out=None,
    resume: bool = True,
    device: str = "auto",
    throughput_key: str | None = None,
    label: str = "",
    sample_telemetry: bool = False,
    on_progress: Callable[[int, int, float | None], None] | None = None,
    on_result: Callable[[Record], None] | None = None,
    cancel: CancelToken | None = None,
) -> SweepResult:
    """Run `point_fn(**fixed, **point)` for every grid point; see the module docstring."""
    points = grid(axes)
    fixed = dict(fixed or {})
    overlap = set(fixed) & set(axes)
    if overlap:
        raise ValueError(f"{sorted(overlap)} are both fixed and swept; drop one of them")
    check_param_names([*fixed, *axes])
    device = resolve_device(device)
    env = dict(environment(), fingerprint=fingerprint(environment()))
    done_keys = _done_keys(out, env["fingerprint"]) if (out and resume) else set()

    result = SweepResult(total=len(points))
    started, measured = time.perf_counter(), 0
    for index, point in enumerate(points, start=1):
        params = {**fixed, **point}
        key = Record(workload=workload, params=params, outcome="error").point_key()
        if key in done_keys:
            result.skipped += 1
        else:
            if cancel is not None and cancel.cancelled:
                result.cancelled = True
                break
            try:
                record = measure_point(point_fn, params, workload=workload, device=device,
                                       env=env, throughput_key=throughput_key, label=label,
                                       sample_telemetry=sample_telemetry, cancel=cancel)
            except Cancelled:
                result.cancelled = True
                break
            measured += 1
            if out:
                append_record(out, record)
            result.records.append(record)
            if on_result:
                on_result(record)
        if on_progress:
            remaining = len(points) - index
            per_point_s = (time.perf_counter() - started) / measured if measured else None
            eta_s = None if per_point_s is None else per_point_s * remaining
            on_progress(index, len(points), eta_s)
    return result


def measure_point(point_fn, params: dict, *, workload: str, device: str, env: dict,
                  throughput_key: str | None = None, label: str = "",
                  sample_telemetry: bool = False, cancel: CancelToken | None = None) -> Record:
    """Run one point and turn whatever happens (result, OOM, exception) into a Record.

    A point function with a `cancel` parameter gets the token, so Stop can end it mid-timing.
    """
    base = {"workload": workload, "params": params, "env": env, "label": label}
    if cancel is not None and _accepts(point_fn, "cancel"):
        point_fn = functools.partial(point_fn, cancel=cancel)
    reset_peak(device)
    try:
        if sample_telemetry and device.startswith("cuda") and HAS_NVML:
            from .telemetry import TelemetrySampler

            with TelemetrySampler(device_index=_device_index(device)) as sampler:
                raw = point_fn(**params)
            raw = {**raw, "telemetry": sampler.summary()}
        else:
            raw = point_fn(**params)
    except Cancelled:
        raise
    except Exception as exc:  # a failed point is data; the sweep goes on
        if is_oom(exc):
            free_after_oom()
            return Record(**base, outcome="oom", message=_first_line(exc),
                          memory=read_memory(device))
        return Record(**base, outcome="error", message=f"{type(exc).__name__}: {_first_line(exc)}")
    try:
        return _record_from_result(raw, base, device, throughput_key)
    except ValueError as exc:  # e.g. a metric named like a column, an unknown outcome
        return Record(**base, outcome="error", message=f"unusable workload result: {exc}")


def _record_from_result(raw, base: dict, device: str, throughput_key: str | None) -> Record:
    if not isinstance(raw, Mapping):
        return Record(**base, outcome="error", message=(
            f"the workload returned {type(raw).__name__}, not a dict of metrics; return e.g. "
            "{'throughput': 123.0, 'throughput_unit': 'samples/s'}"))
    memory = {**read_memory(device), **dict(raw.get("memory") or {})}
    metrics = {k: v for k, v in raw.items() if k not in _RESULT_KEYS}
    timing = raw.get("timing")
    time_ms = timing.samples_ms if isinstance(timing, Timing) else tuple(raw.get("time_ms", ()))
    outcome = raw.get("outcome", "ok")
    common = dict(base, message=str(raw.get("message", "")), time_ms=time_ms, memory=memory,
                  telemetry=raw.get("telemetry"))
    if outcome != "ok":
        return Record(**common, outcome=outcome, metrics=metrics)
    tp_key = "throughput" if "throughput" in raw else throughput_key
    throughput = raw.get(tp_key) if tp_key else None
    if tp_key in metrics:
        del metrics[tp_key]  # stored once, as the record's throughput
    if not is_positive_number(throughput):
        got = f"{tp_key}={throughput!r}" if tp_key else f"keys {sorted(raw)}"
        return Record(**{**common, "message": (
            f"the workload returned no usable throughput ({got}); return a positive number "
            "under 'throughput' or name its key with throughput_key=")}, outcome="error",
            metrics=metrics)
    unit = raw.get("throughput_unit") or (tp_key if tp_key != "throughput" else "")
    return Record(**common, outcome="ok", throughput=float(throughput), throughput_unit=unit,
                  metrics=metrics)


def _done_keys(out, env_fingerprint: str) -> set[str]:
    if not Path(out).exists():
        return set()
    return {r.point_key() for r in read_records(out)
            if r.env.get("fingerprint") == env_fingerprint and r.outcome != "error"}


def _accepts(fn, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # builtins without a signature
        return False


def _device_index(device: str) -> int:
    return int(device.split(":")[1]) if ":" in device else 0


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
