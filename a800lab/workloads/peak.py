"""Measure an achievable peak on the spot (matmul TFLOP/s per precision, copy bandwidth), and
keep clean ones per environment ($A800LAB_PEAKS, default ~/.cache/a800lab/peaks.json).

    report = measure_peak()            # GPU: 8192^3 per precision; CPU: 512^3 fp32
    record_peaks(report, env)          # `a800lab peak` does this
    measured_peak(env, "bf16")         # 281.3 (TFLOP/s), or None when none was recorded
"""

import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..core.backends import resolve_device
from ..core.cancel import CancelToken
from ..core.checks import positive_int
from ..core.environment import cpu_model, environment, fingerprint
from ..core.memory import free_after_oom, is_oom
from ..core.noise import CpuLoadMeter, assess, cpu_conditions
from ..core.operands import make_operands
from ..core.precision import (
    FP8_MULTIPLE,
    PRECISIONS,
    Precision,
    matmul_precision,
    parse_precision,
    unsupported_reason,
)
from ..core.results import LabNotice
from ..core.specs import match, peak_for
from ..core.store import cache_path, read_json, write_json_atomic
from ..core.sweep import thread_count
from ..core.timing import Timing, measure

CUDA_SIZE = 8192            # large enough to saturate an A100/H100 with any tile shape
CPU_SIZE = 512              # ~0.3 GFLOP per call: a fraction of a second on a laptop core
CUDA_COPY_BYTES = 1 << 30   # 1 GiB, far beyond any L2 (A100: 40 MB, H100: 50 MB)
CPU_COPY_BYTES = 64 << 20   # 64 MiB, beyond typical last-level caches
CPU_PRECISIONS = ("fp32",)


@dataclass(frozen=True)
class PeakEntry:
    """One precision: outcome "ok" | "wrong" | "unsupported" | "oom" and, when ok, its rate."""

    precision: str
    outcome: str
    tflops: float | None = None
    datasheet_tflops: float | None = None
    datasheet_source: str = ""
    rel_error: float | None = None
    timing: Timing | None = None
    message: str = ""
    noise: dict = field(default_factory=dict)   # a800lab.core.noise.assess of the timing

    @property
    def noisy(self) -> str:
        """Why this rate is not a clean figure, or ""."""
        return _first_reason(self.noise)

    @property
    def ratio(self) -> float | None:
        """Measured / datasheet dense peak; None when either is unknown."""
        if self.tflops is None or not self.datasheet_tflops:
            return None
        return self.tflops / self.datasheet_tflops

    def to_dict(self) -> dict:
        return {"precision": self.precision, "outcome": self.outcome, "tflops": self.tflops,
                "datasheet_tflops": self.datasheet_tflops,
                "datasheet_source": self.datasheet_source, "ratio": self.ratio,
                "rel_error": self.rel_error, "message": self.message, "noise": self.noise,
                "noisy": bool(self.noisy),
                "timing": self.timing.to_dict() if self.timing else None}


@dataclass(frozen=True)
class PeakReport:
    """Measured peaks on one device beside its datasheet row (when the table knows it)."""

    device: str
    device_name: str
    size: int
    entries: tuple[PeakEntry, ...]
    mem_bw_gbs: float | None
    datasheet_mem_bw_gbs: float | None
    spec_name: str | None
    mem_bw_noise: dict = field(default_factory=dict)

    @property
    def noisy(self) -> dict[str, str]:
        """What was measured under noise ("fp32", "copy"), with why."""
        out = {e.precision: e.noisy for e in self.entries if e.outcome == "ok" and e.noisy}
        if _first_reason(self.mem_bw_noise):
            out["copy"] = _first_reason(self.mem_bw_noise)
        return out

    @property
    def tflops(self) -> dict[str, float]:
        return {e.precision: e.tflops for e in self.entries if e.outcome == "ok"}

    @property
    def unsupported(self) -> dict[str, str]:
        return {e.precision: e.message for e in self.entries if e.outcome == "unsupported"}

    @property
    def failed(self) -> dict[str, str]:
        """Precisions that ran but gave no rate ("wrong", "oom")."""
        return {e.precision: e.message for e in self.entries if e.outcome in ("wrong", "oom")}

    @property
    def mem_bw_ratio(self) -> float | None:
        if self.mem_bw_gbs is None or not self.datasheet_mem_bw_gbs:
            return None
        return self.mem_bw_gbs / self.datasheet_mem_bw_gbs

    def entry(self, precision: str) -> PeakEntry:
        name = parse_precision(precision).name
        for e in self.entries:
            if e.precision == name:
                return e
        raise KeyError(f"{precision!r} was not measured; measured: "
                       f"{[e.precision for e in self.entries]}")

    def format(self) -> str:
        """A plain-text table: measured vs datasheet per precision, then copy bandwidth."""
        lines = [f"{self.device_name} ({self.device}), {self.size}^3 matmul; datasheet row: "
                 f"{self.spec_name or 'none (unknown device)'}",
                 f"{'precision':<10} {'outcome':<12} {'TFLOP/s':>10} {'datasheet':>10} "
                 f"{'ratio':>7}  note"]
        for e in self.entries:
            note = f"! noisy: {e.noisy}" if e.outcome == "ok" and e.noisy else e.message
            lines.append(f"{e.precision:<10} {e.outcome:<12} {short_number(e.tflops):>10} "
                         f"{short_number(e.datasheet_tflops):>10} {_pct(e.ratio):>7}  {note}")
        copy_noise = _first_reason(self.mem_bw_noise)
        lines.append(f"copy bandwidth {short_number(self.mem_bw_gbs)} GB/s, datasheet "
                     f"{short_number(self.datasheet_mem_bw_gbs)} GB/s ({_pct(self.mem_bw_ratio)})"
                     + (f"  ! noisy: {copy_noise}" if copy_noise else ""))
        if self.noisy:
            lines.append("noisy figures are approximate, not a reference (never recorded): "
                         "measure again with the machine idle before quoting them")
        return "\n".join(line.rstrip() for line in lines)

    def to_dict(self) -> dict:
        return {"device": self.device, "device_name": self.device_name, "size": self.size,
                "spec_name": self.spec_name, "mem_bw_gbs": self.mem_bw_gbs,
                "datasheet_mem_bw_gbs": self.datasheet_mem_bw_gbs,
                "mem_bw_ratio": self.mem_bw_ratio, "mem_bw_noise": self.mem_bw_noise,
                "noisy": self.noisy, "entries": [e.to_dict() for e in self.entries]}


def _first_reason(noise: dict) -> str:
    if not noise.get("noisy"):
        return ""
    return (noise.get("reasons") or ["noisy timing"])[0]


def short_number(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def measure_peak(device: str = "auto", precisions: Sequence[str] | None = None,
                 size: int | None = None, budget_s: float = 0.5,
                 cancel: CancelToken | None = None,
                 on_progress: Callable[[int, int, str], None] | None = None,
                 copy_bytes: int | None = None) -> PeakReport:
    """Time a size^3 matmul per precision and a copy of `copy_bytes` on `device`;
    `on_progress(done, total, what)` after each step."""
    device = resolve_device(device)
    on_cpu = device == "cpu"
    names = [parse_precision(p).name for p in
             (precisions or (CPU_PRECISIONS if on_cpu else PRECISIONS))]
    size = positive_int("size", size or (CPU_SIZE if on_cpu else CUDA_SIZE),
                        "512 (the square matmul's edge)")
    device_name = f"CPU: {cpu_model()}" if on_cpu else torch.cuda.get_device_name(device)
    # CPUs are not in the datasheet table; asking would only warn
    spec = None if on_cpu else match(device_name)

    entries, total = [], len(names) + 1
    for done, name in enumerate(names, start=1):
        if cancel is not None:
            cancel.raise_if_cancelled()
        entries.append(_measure_precision(name, size, device, device_name, budget_s, cancel))
        if on_progress:
            on_progress(done, total, f"matmul {name}")
    mem_bw_gbs, mem_bw_noise = _copy_bandwidth(
        device, copy_bytes or (CPU_COPY_BYTES if on_cpu else CUDA_COPY_BYTES), budget_s, cancel)
    if on_progress:
        on_progress(total, total, "copy bandwidth")
    return PeakReport(device=device, device_name=device_name, size=size, entries=tuple(entries),
                      mem_bw_gbs=mem_bw_gbs, datasheet_mem_bw_gbs=spec.mem_bw_gbs if spec else None,
                      spec_name=spec.name if spec else None, mem_bw_noise=mem_bw_noise)


def _measure_precision(name: str, size: int, device: str, device_name: str, budget_s: float,
                       cancel: CancelToken | None) -> PeakEntry:
    datasheet, source = ((None, "CPUs are not in the datasheet table") if device == "cpu"
                         else peak_for(device_name, name))
    base = {"precision": name, "datasheet_tflops": datasheet, "datasheet_source": source}
    reason = unsupported_reason(name, device)
    if not reason and name == "fp8" and size % FP8_MULTIPLE:
        reason = f"fp8 needs a size that is a multiple of {FP8_MULTIPLE}, got {size}"
    if reason:
        return PeakEntry(**base, outcome="unsupported", message=reason)
    prec = parse_precision(name)
    try:
        rel_error, timing, noise = _check_and_time(prec, size, device, budget_s, cancel)
    except Exception as exc:
        if not is_oom(exc):
            raise
        rel_error = None
    if rel_error is None:  # out of memory
        free_after_oom()  # after the except block, so the traceback no longer pins the inputs
        return PeakEntry(**base, outcome="oom",
                         message=f"out of memory at {size}^3 {name}; pass a smaller size=")
    if timing is None:
        return PeakEntry(**base, outcome="wrong", rel_error=rel_error, message=(
            f"{name} result off: relative error {rel_error:.3g} vs float64 exceeds "
            f"{prec.rtol:g}; not timed"))
    tflops = 2 * size**3 / (timing.median_ms * 1e-3) / 1e12
    return PeakEntry(**base, outcome="ok", tflops=tflops, rel_error=rel_error, timing=timing,
                     noise=noise)


def _timed(fn, device: str, budget_s: float, cancel: CancelToken | None,
           **options) -> tuple[Timing, dict]:
    """measure(fn) and its noise verdict, given other processes' CPU load (contention)."""
    meter = CpuLoadMeter().start()
    timing = measure(fn, device=device, budget_s=budget_s, cancel=cancel, **options)
    return timing, assess(timing.samples_ms, cpu_conditions(meter.stop()), on_cpu=device == "cpu")


def _check_and_time(prec: Precision, size: int, device: str, budget_s: float,
                    cancel: CancelToken | None) -> tuple[float, Timing | None, dict]:
    ops = make_operands(size, size, size, prec, device)
    with matmul_precision(prec):
        rel_error = ops.rel_error(ops.run())
        if not rel_error <= prec.rtol:  # also catches NaN
            return rel_error, None, {}
        return (rel_error, *_timed(ops.run, device, budget_s, cancel))


def _copy_bandwidth(device: str, n_bytes: int, budget_s: float,
                    cancel: CancelToken | None) -> tuple[float, dict]:
    """(GB/s, noise verdict) of a copy: each byte read once and written once."""
    src = torch.ones(n_bytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    # the copy itself streams far more than L2, so flushing between calls would only cost time
    timing, noise = _timed(lambda: dst.copy_(src), device, budget_s, cancel, flush_l2=False)
    if not torch.equal(dst, src):
        raise RuntimeError(f"the bandwidth copy on {device} produced wrong data")
    return 2 * src.numel() * 4 / (timing.median_ms * 1e-3) / 1e9, noise


# ---- point functions the battery adds ---------------------------------------------------------
def peak_point(device: str, precision: str, size: int, *, budget_s: float = 0.3,
               cancel: CancelToken | None = None) -> dict:
    """One card's size^3 matmul rate and copy bandwidth beside the datasheet's."""
    report = measure_peak(device, precisions=[precision], size=size, budget_s=budget_s,
                          cancel=cancel)
    entry = report.entries[0]
    base = {"card_name": report.device_name, "datasheet_tflops": entry.datasheet_tflops,
            "datasheet_source": entry.datasheet_source, "rel_error": entry.rel_error,
            "copy_gbs": report.mem_bw_gbs, "datasheet_copy_gbs": report.datasheet_mem_bw_gbs}
    if entry.outcome == "unsupported":
        raise ValueError(entry.message)
    if entry.outcome != "ok":
        return {**base, "outcome": entry.outcome, "message": entry.message}
    return {**base, "throughput": entry.tflops, "throughput_unit": "TFLOP/s",
            "timing": entry.timing, "ratio_of_datasheet": entry.ratio}


PEAKS_ENV, PEAKS_FILE = "A800LAB_PEAKS", "peaks.json"


def default_peaks_path() -> Path:
    return cache_path(PEAKS_ENV, PEAKS_FILE)


def _recorded(env: dict, path: str | os.PathLike | None) -> dict:
    """This environment's recorded peaks; {} for none (an unreadable file warns)."""
    try:
        entries = read_json(Path(path) if path is not None else default_peaks_path(),
                            what="a peaks file")
    except ValueError as exc:
        warnings.warn(f"{exc}; measured peaks are ignored until then", LabNotice, stacklevel=3)
        return {}
    return entries.get(fingerprint(env), {})


def record_peaks(report, env: dict, path: str | os.PathLike | None = None) -> Path:
    """Store a PeakReport's clean TFLOP/s and copy bandwidth for this environment (a noisy
    figure never: an earlier clean one stays)."""
    path = Path(path) if path is not None else default_peaks_path()
    entries = read_json(path, what="a peaks file")
    key, noisy = fingerprint(env), report.noisy
    old = entries.get(key, {})
    clean = {p: v for p, v in report.tflops.items() if p not in noisy}
    if not clean and "copy" in noisy:
        return path  # nothing clean to keep: the file is left as it was
    entries[key] = {"device_name": report.device_name, "size": report.size,
                    "tflops": {**old.get("tflops", {}), **clean},
                    "mem_bw_gbs": old.get("mem_bw_gbs") if "copy" in noisy
                    else report.mem_bw_gbs}
    return write_json_atomic(path, entries)


def measured_peak(env: dict, precision: str, path: str | os.PathLike | None = None
                  ) -> float | None:
    """The recorded peak TFLOP/s of `precision` in this environment, or None."""
    return _recorded(env, path).get("tflops", {}).get(precision)


def roofline_peaks(device: str, precision: str, *, measure_missing: bool = True,
                   budget_s: float = 0.2, torch_threads: int | None = None,
                   path: str | os.PathLike | None = None) -> dict:
    """The roofs for `device` and `precision`: the datasheet's peak and bandwidth, and the
    recorded measured ones (with `measure_missing`, measured now at `torch_threads` when none
    was recorded); a noisy figure is None."""
    device = resolve_device(device)
    name = parse_precision(precision).name
    peak, bw = None, None
    if device != "cpu":
        row = match(torch.cuda.get_device_name(device))
        if row is not None:
            peak, bw = row.peak_tflops[name], row.mem_bw_gbs
    recorded = _recorded(environment(device), path)
    measured, measured_bw = recorded.get("tflops", {}).get(name), recorded.get("mem_bw_gbs")
    if measure_missing and (measured is None or measured_bw is None):
        with thread_count(torch_threads):
            report = measure_peak(device, precisions=[name], budget_s=budget_s)
        noisy = report.noisy  # a noisy figure is no roof, as it is no record
        measured = None if name in noisy else report.tflops.get(name)
        measured_bw = None if "copy" in noisy else report.mem_bw_gbs
    return {"peak_tflops": peak, "mem_bw_gbs": bw, "measured_peak_tflops": measured,
            "measured_bw_gbs": measured_bw}
