"""Measured peaks kept per machine, so that "% of measured peak" needs no re-measuring.

    record_peaks(report, env)          # after measure_peak(); `a800lab peak` does this
    measured_peak(env, "bf16")         # 281.3 (TFLOP/s), or None when none was recorded
    default_peaks_path()               # $A800LAB_PEAKS, else ~/.cache/a800lab/peaks.json

Peaks are keyed by the environment fingerprint (machine, device name, driver, torch, CUDA; see
a800lab.core.environment), so another GPU, a new driver or a new torch is measured again rather
than compared with an old number. The file is replaced atomically; one that cannot be read is
named in a warning and left untouched, and the figures that need it are simply absent.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

from .environment import fingerprint


def default_peaks_path() -> Path:
    """$A800LAB_PEAKS, else $XDG_CACHE_HOME/a800lab/peaks.json (~/.cache/...)."""
    if os.environ.get("A800LAB_PEAKS"):
        return Path(os.environ["A800LAB_PEAKS"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "a800lab" / "peaks.json"


def _read(path: Path) -> dict | None:
    """The stored entries, {} for no file, None (with a warning) for an unreadable one."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        warnings.warn(f"{path}: not a peaks file ({exc}); measured peaks are ignored until it "
                      "is moved away", stacklevel=3)
        return None
    if not isinstance(data, dict):
        warnings.warn(f"{path}: not a peaks file (not a JSON object)", stacklevel=3)
        return None
    return data


def record_peaks(report, env: dict, path: str | os.PathLike | None = None) -> Path:
    """Store a PeakReport's measured TFLOP/s (and copy bandwidth) for this environment."""
    path = Path(path) if path is not None else default_peaks_path()
    entries = _read(path)
    if entries is None:
        raise ValueError(f"{path} is not a peaks file; move it away or pass another path")
    entries[fingerprint(env)] = {"device_name": report.device_name, "tflops": report.tflops,
                                 "mem_bw_gbs": report.mem_bw_gbs, "size": report.size}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(entries, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)
    return path


def measured_peak(env: dict, precision: str, path: str | os.PathLike | None = None
                  ) -> float | None:
    """The recorded peak TFLOP/s of `precision` in this environment, or None."""
    entries = _read(Path(path) if path is not None else default_peaks_path())
    entry = (entries or {}).get(fingerprint(env))
    return None if entry is None else entry.get("tflops", {}).get(precision)
