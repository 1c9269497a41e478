"""Sweeps: a point function over a grid of named axes, one record per point, appended as it is
measured (resumable). An out-of-memory error becomes an "oom" record, any other exception an
"error" record; cancelling stops after the current point.

    res = run_sweep(point, {"m": [256, 512], "precision": ["fp32"]}, workload="matmul",
                    out="runs.jsonl", on_progress=lambda done, total, eta_s: ...)
"""

import contextlib
import functools
import inspect
import itertools
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from .backends import HAS_NVML, resolve_device
from .cancel import Cancelled, CancelToken
from .checks import positive_int
from .environment import environment, fingerprint
from .memory import free_after_oom, is_oom, read_memory
from .noise import assess
from .results import (
    Record,
    append_record,
    as_number,
    check_param_names,
    check_writable,
    done_keys,
    is_positive_number,
    new_run_id,
)
from .timing import Timing
from .warmup import warm_runtime
from .window import PointWindow

# spread_is_noise False: the samples are a distribution under study (latencies under load),
# so only the machine's state judges the point; noise_reasons: the point's own, added
_RESULT_KEYS = ("throughput", "throughput_unit", "timing", "time_ms", "outcome", "message",
                "memory", "telemetry", "spread_is_noise", "noise_reasons")


@dataclass
class SweepResult:
    """What a sweep produced: new records, how many points were skipped, whether it was stopped."""

    records: list[Record] = field(default_factory=list)
    skipped: int = 0
    cancelled: bool = False
    total: int = 0
    run_id: str = ""


def _distinct(values: Sequence) -> list:
    """Values in order with duplicates dropped (a size given twice is measured once)."""
    seen, out = set(), []
    for value in values:
        key = json.dumps(value, sort_keys=True, default=repr)
        if key not in seen:
            seen.add(key)
            out.append(value)
    return out


def grid(axes: Mapping[str, Sequence]) -> list[dict]:
    """Cartesian product of the named axes, in axis order (the last axis varies fastest);
    a value repeated on an axis is kept once."""
    if not axes:
        raise ValueError("the sweep has no axes; give at least one, e.g. {'m': [256, 512]}")
    for name, values in axes.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            raise ValueError(f"axis {name!r} needs a list of values, got {values!r}")
        if len(values) == 0:
            raise ValueError(f"axis {name!r} has no values; give at least one")
    names = list(axes)
    return [dict(zip(names, combo, strict=True))
            for combo in itertools.product(*(_distinct(v) for v in axes.values()))]


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
    torch_threads: int | None = None,
    run_id: str | None = None,
    on_progress: Callable[[int, int, float | None], None] | None = None,
    on_result: Callable[[Record], None] | None = None,
    cancel: CancelToken | None = None,
) -> SweepResult:
    """Run `point_fn(**fixed, **point)` for every grid point (see the module docstring); `out` is
    checked for writability before anything runs (None keeps the records in memory);
    `torch_threads` sets torch's CPU threads for the sweep (restored after)."""
    points = grid(axes)
    fixed = dict(fixed or {})
    overlap = set(fixed) & set(axes)
    if overlap:
        raise ValueError(f"{sorted(overlap)} are both fixed and swept; drop one of them")
    check_param_names([*fixed, *axes])
    device = resolve_device(device)
    if out is not None:
        check_writable(out)
    env = environment(device)
    env["fingerprint"] = fingerprint(env)
    done = done_keys(out, env["fingerprint"]) if (out and resume) else set()

    result = SweepResult(total=len(points), run_id=run_id or new_run_id())
    started, measured = time.perf_counter(), 0
    with thread_count(torch_threads):
        for index, point in enumerate(points, start=1):
            params = {**fixed, **point}
            key = Record(workload=workload, params=params, outcome="error").point_key()
            if key in done:
                result.skipped += 1
            else:
                if cancel is not None and cancel.cancelled:
                    result.cancelled = True
                    break
                try:
                    record = measure_point(point_fn, params, workload=workload, device=device,
                                           env=env, throughput_key=throughput_key, label=label,
                                           sample_telemetry=sample_telemetry, cancel=cancel,
                                           run_id=result.run_id)
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
                eta_s = ((time.perf_counter() - started) / measured * (len(points) - index)
                         if measured else None)
                on_progress(index, len(points), eta_s)
    return result


@contextlib.contextmanager
def thread_count(torch_threads: int | None) -> Iterator[None]:
    """torch's intra-op threads set to `torch_threads` in the block, then restored (None: as is)."""
    if torch_threads is None:
        yield
        return
    saved = torch.get_num_threads()
    torch.set_num_threads(positive_int("torch_threads", torch_threads, "1"))
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def measure_point(point_fn, params: dict, *, workload: str, device: str, env: dict,
                  throughput_key: str | None = None, label: str = "",
                  sample_telemetry: bool = False, cancel: CancelToken | None = None,
                  run_id: str = "") -> Record:
    """Run one point and turn whatever happens (result, OOM, exception) into a Record, its memory,
    telemetry and CPU load from the point's window. A point function taking `device` gets the
    sweep's (else it runs inside torch.cuda.device); one taking `cancel` gets the token."""
    base = {"workload": workload, "params": params, "env": env, "label": label,
            "run_id": run_id}
    call = functools.partial(point_fn, **params)
    if cancel is not None and _accepts(point_fn, "cancel"):
        call = functools.partial(call, cancel=cancel)
    if "device" not in params and _accepts(point_fn, "device"):
        call = functools.partial(call, device=device)
        on_device = contextlib.nullcontext()
    else:
        on_device = _cuda_device(device)
    outcome = "ok"
    warm_runtime(device)  # torch's one-time costs, before (never inside) the first window
    try:
        with on_device, PointWindow(device, sampler=_sampler(device, sample_telemetry)) as window:
            raw = call()
    except (KeyboardInterrupt, Cancelled):
        raise
    except BaseException as exc:  # a failed point is data, SystemExit from a user's code too
        outcome, message = ("oom" if is_oom(exc) else "error"), first_line(exc)
        if outcome == "error":
            message = f"{type(exc).__name__}: {message}"
    # Out of the except block the traceback is gone, and with it the point's frames and
    # tensors: only now can the memory really be freed.
    if outcome == "oom":
        free_after_oom()
        return Record(**base, outcome="oom", message=message, memory=read_memory(device))
    if outcome == "error":
        return Record(**base, outcome="error", message=message)
    try:
        return _record_from_result(raw, base, throughput_key, window)
    except Exception as exc:  # e.g. a metric named like a column, time_ms that is not numbers
        return Record(**base, outcome="error",
                      message=f"unusable workload result: {type(exc).__name__}: {exc}")


def _cuda_device(device: str):
    return torch.cuda.device(device) if device.startswith("cuda") else contextlib.nullcontext()


def _sampler(device: str, sample_telemetry: bool):
    """A telemetry sampler of the GPU behind `device` (matched by UUID), or None."""
    if not (sample_telemetry and device.startswith("cuda") and HAS_NVML):
        return None
    from .telemetry import TelemetrySampler

    return TelemetrySampler(cuda_device=device)


def _time_samples(raw: Mapping) -> tuple[float, ...]:
    timing = raw.get("timing")
    if timing is not None:
        if not isinstance(timing, Timing):
            raise ValueError(f"'timing' must be a Timing from measure(), got "
                             f"{type(timing).__name__}")
        return timing.samples_ms
    time_ms = raw.get("time_ms", ())
    if isinstance(time_ms, str) or not isinstance(time_ms, Sequence):
        raise ValueError(f"'time_ms' must be a list of per-call milliseconds, got {time_ms!r}")
    samples = tuple(as_number(t) for t in time_ms)
    if any(t is None for t in samples):
        raise ValueError(f"'time_ms' must hold numbers of milliseconds, got {list(time_ms)[:5]!r}")
    return samples


def _record_from_result(raw, base: dict, throughput_key: str | None,
                        window: PointWindow) -> Record:
    if not isinstance(raw, Mapping):
        return Record(**base, outcome="error", message=(
            f"the workload returned {type(raw).__name__}, not a dict of metrics; return e.g. "
            "{'throughput': 123.0, 'throughput_unit': 'samples/s'}"))
    own_memory = raw.get("memory") or {}
    if not isinstance(own_memory, Mapping):
        raise ValueError(f"'memory' must be a dict of byte counts, got {own_memory!r}")
    telemetry = window.telemetry()
    if telemetry is None:
        telemetry = raw.get("telemetry")
    time_ms = _time_samples(raw)
    conditions = window.conditions()
    params = base["params"]  # a result that echoes a parameter's own value says nothing new
    metrics = {k: v for k, v in raw.items()
               if k not in _RESULT_KEYS and not (k in params and v == params[k])}
    outcome = raw.get("outcome", "ok")
    own = {k: raw[key] for k, key in (("spread", "spread_is_noise"), ("reasons", "noise_reasons"))
           if key in raw}
    noise = assess(time_ms, conditions, on_cpu=not window.device.startswith("cuda"), **own)
    common = dict(base, message=str(raw.get("message", "")), time_ms=time_ms,
                  memory={**window.memory(), **own_memory}, telemetry=telemetry,
                  conditions=conditions, noise=noise)
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
    return Record(**common, outcome="ok", throughput=as_number(throughput),
                  throughput_unit=str(unit), metrics=metrics)


def _accepts(fn, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # builtins without a signature
        return False


def first_line(exc: BaseException) -> str:
    """An exception's message in one line (its first), or its type's name when empty."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
