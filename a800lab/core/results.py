"""Result records: one per measured point, appended to JSON Lines as they are measured.

    rec = Record(workload="matmul", params={"m": 1024, "precision": "fp32"}, outcome="ok",
                 throughput=12.3, throughput_unit="TFLOP/s", time_ms=(0.17, 0.18, 0.17))
    append_record("runs.jsonl", rec)        # flushed and fsynced: a killed writer loses nothing
    df = load_results("runs.jsonl")          # pandas DataFrame, one row per point

Loading skips a torn last line (a writer killed mid-line) with a warning; any other malformed
line is an error naming the file and line. Appending after a torn line first cuts the torn
fragment off, so the file stays valid. JSON only, never pickle.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from .timing import Timing

SCHEMA_VERSION = 1
OUTCOMES = ("ok", "oom", "wrong", "error")
# rss_bytes: the process's resident set after a CPU point (torch keeps no CPU allocator peaks)
MEMORY_KEYS = ("peak_allocated_bytes", "peak_reserved_bytes", "capacity_bytes", "rss_bytes")
# Frame columns the record itself fills; a workload's params and metrics must not reuse them.
RESERVED_COLUMNS = frozenset({
    "workload", "outcome", "message", "throughput", "throughput_unit", "time_ms", "median_ms",
    "iqr_ms", "min_ms", "device_name", "fingerprint", "label", "timestamp", "telemetry",
    "schema_version", *MEMORY_KEYS,
})


def check_param_names(names) -> None:
    """Refuse parameter names that the results table uses for its own columns."""
    reserved = set(names) & RESERVED_COLUMNS
    if reserved:
        raise ValueError(f"parameter names {sorted(reserved)} are reserved by the results table; "
                         "rename them")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class Record:
    """One measured point: what was run, what happened, and where."""

    workload: str
    params: dict
    outcome: str
    message: str = ""
    throughput: float | None = None
    throughput_unit: str = ""
    time_ms: tuple[float, ...] = ()
    metrics: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    telemetry: dict | None = None
    env: dict = field(default_factory=dict)
    label: str = ""
    timestamp: str = field(default_factory=_now)
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome {self.outcome!r} is not one of {OUTCOMES}")
        if self.outcome == "ok":
            if not is_positive_number(self.throughput):
                raise ValueError(f"an 'ok' record needs a positive finite throughput, got "
                                 f"{self.throughput!r}; record the point as 'error' instead")
        elif self.throughput is not None:
            raise ValueError(f"a {self.outcome!r} record has no throughput; got {self.throughput}")
        clash = (set(self.params) | set(self.metrics)) & RESERVED_COLUMNS
        if clash:
            raise ValueError(f"parameter/metric names {sorted(clash)} are reserved by the results "
                             "table; rename them")
        both = set(self.params) & set(self.metrics)
        if both:
            raise ValueError(f"names {sorted(both)} are both a parameter and a metric; rename one")
        try:
            self.to_json()
        except (TypeError, ValueError) as exc:  # NaN/inf or an object JSON cannot hold
            raise ValueError(f"record is not storable as JSON: {exc}") from exc

    def to_json(self) -> str:
        d = asdict(self)
        d["time_ms"] = list(self.time_ms)
        return json.dumps(_finite_or_none(d), sort_keys=True, allow_nan=False,
                          default=_jsonable)

    @classmethod
    def from_dict(cls, d: dict) -> Record:
        version = d.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(f"schema_version {version!r}, this a800lab reads version "
                             f"{SCHEMA_VERSION}; load it with the a800lab release that wrote it "
                             "or re-run the sweep")
        d = dict(d)
        d["time_ms"] = tuple(d.get("time_ms", ()))
        known = cls.__dataclass_fields__
        unknown = set(d) - set(known)
        if unknown:
            raise ValueError(f"unknown fields {sorted(unknown)}")
        return cls(**d)

    def point_key(self) -> str:
        """Workload + params as canonical JSON: the identity of a grid point."""
        return json.dumps({"workload": self.workload, "params": self.params}, sort_keys=True,
                          default=_jsonable)


def is_positive_number(x) -> bool:
    """A finite number above zero (bools excluded): what a throughput must be."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _finite_or_none(x):
    """NaN and infinities are not JSON: store them as null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite_or_none(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite_or_none(v) for v in x]
    return x


def _jsonable(x):
    """Numpy scalars and similar -> plain Python; anything else is a clear error."""
    if hasattr(x, "item"):
        return x.item()
    if isinstance(x, (set, frozenset, tuple)):
        return list(x)
    raise TypeError(f"{type(x).__name__} value {x!r} cannot be stored in a results file; "
                    "return numbers, strings, lists or dicts")


def _check_path(path: str | os.PathLike) -> Path:
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"results path {str(p)!r} is a directory; give a file path such as "
                         f"{str(p / 'runs.jsonl')!r}")
    return p


def append_record(path: str | os.PathLike, record: Record) -> None:
    """Append one record as a JSON line, flushed and fsynced before returning."""
    p = _check_path(path)
    line = record.to_json() + "\n"
    p.parent.mkdir(parents=True, exist_ok=True)
    _cut_torn_tail(p)
    with open(p, "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def _cut_torn_tail(p: Path) -> None:
    """A file not ending in a newline was cut mid-record by a killed writer: drop the fragment."""
    if not p.exists() or p.stat().st_size == 0:
        return
    with open(p, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
        f.seek(0)
        content = f.read()
        keep = content.rfind(b"\n") + 1
        warnings.warn(f"{p}: dropping a torn last line ({len(content) - keep} bytes) left by an "
                      "interrupted writer", stacklevel=3)
        f.truncate(keep)


def read_records(path: str | os.PathLike) -> list[Record]:
    """All complete records in a JSON Lines file, in file order."""
    p = _check_path(path)
    if not p.exists():
        raise FileNotFoundError(f"no results file at {str(p)!r}")
    with open(p, encoding="utf-8") as f:
        lines = f.readlines()
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(Record.from_dict(json.loads(line)))
        except (json.JSONDecodeError, TypeError, ValueError) as exc:
            torn = number == len(lines) and not line.endswith("\n")
            if torn and isinstance(exc, json.JSONDecodeError):
                warnings.warn(f"{p}:{number}: skipping a torn last line (writer interrupted)",
                              stacklevel=2)
                continue
            raise ValueError(f"{p}:{number}: malformed result record: {exc}") from exc
    return records


def records_to_frame(records: list[Record]) -> pd.DataFrame:
    """One row per record: params and metrics as columns beside the record's own columns."""
    rows = []
    for r in records:
        times = list(r.time_ms)
        stats = _time_stats(times)
        row = {
            **r.params,
            "workload": r.workload,
            "outcome": r.outcome,
            "message": r.message,
            "throughput": math.nan if r.throughput is None else float(r.throughput),
            "throughput_unit": r.throughput_unit,
            "time_ms": times,
            **stats,
            **{k: _nan_if_none(r.memory.get(k)) for k in MEMORY_KEYS},
            **r.metrics,
            "device_name": r.env.get("device_name", "unknown device"),
            "fingerprint": r.env.get("fingerprint", ""),
            "label": r.label or r.env.get("device_name", "unknown device"),
            "timestamp": r.timestamp,
            "telemetry": r.telemetry,
        }
        rows.append(row)
    return pd.DataFrame(rows)


def load_results(path: str | os.PathLike) -> pd.DataFrame:
    """Read a JSON Lines results file into a DataFrame (see records_to_frame)."""
    return records_to_frame(read_records(path))


def _nan_if_none(x):
    return math.nan if x is None else float(x)


def _time_stats(times: list[float]) -> dict:
    if not times:
        return {"median_ms": math.nan, "iqr_ms": math.nan, "min_ms": math.nan}
    t = Timing(samples_ms=tuple(times), warmup=0, device="")
    return {"median_ms": t.median_ms, "iqr_ms": t.iqr_ms, "min_ms": t.min_ms}
