"""Result records: one per measured point, appended to JSON Lines (flushed and fsynced) as it is
measured; loading skips a torn last line with a warning and names the file and line of anything
else malformed. JSON only, never pickle.

    append_record("runs.jsonl", Record(workload="matmul", params={...}, outcome="ok", ...))
    df = load_results("runs.jsonl")
"""

import json
import math
import numbers
import os
import secrets
import tempfile
import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from .timing import Timing


class LabNotice(UserWarning):
    """Something the lab did on its own that a user should know (a torn last line skipped, a
    peaks file ignored): the command line prints it as one line, "a800lab: note: ..."."""


SCHEMA_VERSION = 2
READABLE_SCHEMA_VERSIONS = (1, 2)
OUTCOMES = ("ok", "oom", "wrong", "error")
# The workload's own peak: peak_allocated_bytes on CUDA (live tensors), peak_rss_bytes on CPU
# (resident set above the point's start); see a800lab.core.window.
MEMORY_KEYS = ("peak_allocated_bytes", "peak_reserved_bytes", "peak_rss_bytes",
               "baseline_allocated_bytes", "baseline_rss_bytes", "capacity_bytes")
# Frame columns of what a point measured: no parameter or metric may take these names.
RESULT_COLUMNS = frozenset({
    "outcome", "throughput", "throughput_unit", "time_ms", "median_ms", "iqr_ms", "min_ms",
    *MEMORY_KEYS,
})
# Frame columns of where and when it ran. A metric may not take these names; a parameter may
# (your `mode` or `label` is yours): it then sits in the frame as "param.<name>" (param_column).
RECORD_COLUMNS = frozenset({
    "workload", "message", "device_name", "fingerprint", "label", "timestamp", "telemetry",
    "schema_version", "run_id", "noisy", "noise_reason", "torch_threads", "mode",
})
RESERVED_COLUMNS = RESULT_COLUMNS | RECORD_COLUMNS


def check_param_names(names) -> None:
    """Refuse parameter names that name what a point measured (throughput, time_ms, ...)."""
    reserved = set(names) & RESULT_COLUMNS
    if reserved:
        raise ValueError(f"parameter names {sorted(reserved)} are reserved by the results table "
                         "for what a point measured; rename them")


def param_column(name: str) -> str:
    """The frame column holding parameter `name`: its own name, or "param.<name>" for a name
    the record uses for itself (mode, label, message, workload, fingerprint, ...)."""
    return f"param.{name}" if name in RECORD_COLUMNS else name


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def new_run_id() -> str:
    """A run id that sorts by start time: "20261130T214501.123Z-3f2a"."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%f")[:-3]
    return f"{stamp}Z-{secrets.token_hex(2)}"


def as_number(x) -> float | None:
    """A real number of any common type (int, float, numpy scalar, 0-d tensor or array) as a
    float; None for anything else (bools, strings, containers)."""
    if isinstance(x, bool):
        return None
    if isinstance(x, numbers.Real):
        return float(x)
    if getattr(x, "ndim", None) == 0 and hasattr(x, "item"):  # 0-d torch tensor / numpy array
        return as_number(x.item())
    return None


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
    run_id: str = ""
    noise: dict = field(default_factory=dict)
    conditions: dict = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        for name in ("params", "metrics", "memory", "env", "noise", "conditions"):
            if not isinstance(getattr(self, name), Mapping):
                raise ValueError(f"{name} must be a dict, got "
                                 f"{type(getattr(self, name)).__name__}")
        if self.telemetry is not None and not isinstance(self.telemetry, Mapping):
            raise ValueError(f"telemetry must be a dict or None, got "
                             f"{type(self.telemetry).__name__}")
        if not all(isinstance(t, int | float) and not isinstance(t, bool) and math.isfinite(t)
                   and t >= 0 for t in self.time_ms):
            raise ValueError(f"time_ms must hold finite times >= 0 in milliseconds, got "
                             f"{list(self.time_ms)[:5]!r}")
        bad_memory = {k: v for k, v in self.memory.items()
                      if v is not None and as_number(v) is None}
        if bad_memory:
            raise ValueError(f"memory values must be numbers of bytes or None, got {bad_memory}")
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome {self.outcome!r} is not one of {OUTCOMES}")
        if self.outcome == "ok":
            if not is_positive_number(self.throughput):
                raise ValueError(f"an 'ok' record needs a positive finite throughput, got "
                                 f"{self.throughput!r}; record the point as 'error' instead")
        elif self.throughput is not None:
            raise ValueError(f"a {self.outcome!r} record has no throughput; got {self.throughput}")
        clash = (set(self.params) & RESULT_COLUMNS) | (set(self.metrics) & RESERVED_COLUMNS)
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
        return json.dumps(_finite_or_none(asdict(self)), sort_keys=True, allow_nan=False,
                          default=_jsonable)

    @classmethod
    def from_dict(cls, d: dict) -> "Record":
        if not isinstance(d, dict):
            raise ValueError(f"expected a JSON object (a record), got {type(d).__name__}")
        version = d.get("schema_version")
        if version not in READABLE_SCHEMA_VERSIONS:
            raise ValueError(f"schema_version {version!r}, this a800lab reads versions "
                             f"{READABLE_SCHEMA_VERSIONS}; load it with the a800lab release that "
                             "wrote it or re-run the sweep")
        time_ms = d.get("time_ms", ())
        if not isinstance(time_ms, list | tuple):
            raise ValueError(f"time_ms must be a list of milliseconds, got {time_ms!r}")
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown fields {sorted(unknown)}")
        return cls(**{**d, "time_ms": tuple(time_ms)})

    def measurement_key(self) -> tuple[str, str, str]:
        """(run_id, timestamp, point_key): the identity of this one measurement, the same in
        memory and after a round trip through a file (Save then Load adds nothing twice)."""
        return self.run_id, self.timestamp, self.point_key()

    def point_key(self) -> str:
        """Workload + params as canonical JSON: the identity of a grid point."""
        return json.dumps({"workload": self.workload, "params": self.params}, sort_keys=True,
                          default=_jsonable)


def is_positive_number(x) -> bool:
    """A finite real number above zero (bools excluded): what a throughput must be."""
    value = as_number(x)
    return value is not None and math.isfinite(value) and value > 0


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
    if path is None or str(path).strip() == "":
        raise ValueError("the results path is empty (an unset shell variable?); give a file "
                         "path such as 'runs.jsonl'")
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"results path {str(p)!r} is a directory; give a file path such as "
                         f"{str(p / 'runs.jsonl')!r}")
    return p


def check_writable(path: str | os.PathLike) -> Path:
    """Refuse, before anything is measured, a results path that cannot be appended to (tried
    for real: permission bits do not bind root, and /proc or a read-only mount refuse anyway)."""
    p = _check_path(path)
    parent = p.parent
    while not parent.exists():  # the first existing folder above decides
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"cannot create {str(p)!r}: {str(parent)!r} is a file, not a folder")
    existed = p.exists()
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        open(p, "a", encoding="utf-8").close()
    except OSError as exc:
        raise ValueError(f"cannot write results to {str(p)!r}: {exc.strerror or exc}; choose "
                         "another --out or fix its permissions") from None
    if not existed:
        p.unlink()  # leave no empty file behind a sweep that may still be refused
    return p


def check_folder(path: str | os.PathLike, option: str = "--out") -> Path:
    """Refuse, before anything runs, a folder that cannot be made or written into: a file, a
    path under a file, a read-only place. Nothing is created; permission as the user has it
    (os.access), then a probe file, since /proc or a read-only mount refuse even root."""
    p = Path(path).expanduser()
    if p.exists() and not p.is_dir():
        raise ValueError(f"{option} {path} is a file, not a folder; give a folder (made if "
                         "missing)")
    above = p
    while not above.exists():  # the first existing folder above is where mkdir will write
        above = above.parent
    if not above.is_dir():
        raise ValueError(f"{option} {path}: {above} is a file, so no folder can be made under "
                         "it; give another folder")
    why = "" if os.access(above, os.W_OK | os.X_OK) else "no permission to write there"
    if not why:
        try:
            tempfile.TemporaryFile(dir=above).close()
        except OSError as exc:
            why = f"a file made there fails: {exc.strerror or exc}"
    if why:
        raise ValueError(f"{option} {path}: cannot write into {above} ({why}); give a folder "
                         "you can write to")
    return p


def append_record(path: str | os.PathLike, record: Record) -> None:
    """Append one record as a JSON line, flushed and fsynced before returning."""
    p = _check_path(path)
    line = record.to_json() + "\n"
    p.parent.mkdir(parents=True, exist_ok=True)
    _mend_tail(p)
    with open(p, "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def _mend_tail(p: Path) -> None:
    """Make the file end in a newline before appending. A last line that parses is a complete
    record missing only its newline (an editor, a copy): it gets one. Anything else was cut
    mid-record by a killed writer: that fragment is dropped, with a warning."""
    if not p.exists() or p.stat().st_size == 0:
        return
    with open(p, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
        f.seek(0)
        content = f.read()
        keep = content.rfind(b"\n") + 1
        try:
            Record.from_dict(json.loads(content[keep:]))
        except (ValueError, TypeError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            warnings.warn(f"{p}: dropping a torn last line ({len(content) - keep} bytes) left by "
                          "an interrupted writer", LabNotice, stacklevel=3)
            f.truncate(keep)
        else:
            f.write(b"\n")


def read_records(path: str | os.PathLike) -> list[Record]:
    """All complete records in a JSON Lines file, in file order."""
    p = _check_path(path)
    if not p.exists():
        raise FileNotFoundError(f"no results file at {str(p)!r}")
    try:
        with open(p, encoding="utf-8") as f:
            lines = f.readlines()
    except UnicodeDecodeError as exc:
        line = p.read_bytes()[:exc.start].count(b"\n") + 1
        raise ValueError(f"{p}:{line}: not UTF-8 text ({exc.reason} at byte {exc.start}); is it "
                         "a results file written by a800lab?") from exc
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
                              LabNotice, stacklevel=2)
                continue
            raise ValueError(f"{p}:{number}: malformed result record: {exc}") from exc
    return records


def done_keys(path: str | os.PathLike, env_fingerprint: str,
              key: Callable[[Record], str] = Record.point_key) -> set[str]:
    """The resume rule, once for every runner: keys of the points in `path` (none if absent)
    measured in this environment (the same fingerprint) that are not errors (those are retried)."""
    if not Path(path).exists():
        return set()
    return {key(r) for r in read_records(path)
            if r.env.get("fingerprint") == env_fingerprint and r.outcome != "error"}


def records_to_frame(records: list[Record]) -> pd.DataFrame:
    """One row per record: params and metrics as columns beside the record's own columns."""
    return pd.DataFrame([{
        **{param_column(k): v for k, v in r.params.items()},
        "workload": r.workload,
        "outcome": r.outcome,
        "message": r.message,
        "throughput": math.nan if r.throughput is None else float(r.throughput),
        "throughput_unit": r.throughput_unit,
        "time_ms": list(r.time_ms),
        **_time_stats(r.time_ms),
        **{k: _nan_if_none(r.memory.get(k)) for k in MEMORY_KEYS},
        **r.metrics,
        "device_name": r.env.get("device_name", "unknown device"),
        "mode": r.env.get("mode") or (  # records written before env carried the mode
            "CPU fallback" if r.env.get("device_name", "").startswith("CPU") else "GPU"),
        "fingerprint": r.env.get("fingerprint", ""),
        "label": r.label or r.env.get("device_name", "unknown device"),
        "timestamp": r.timestamp,
        "telemetry": r.telemetry,
        "run_id": r.run_id,
        "noisy": bool(r.noise.get("noisy", False)),
        "noise_reason": "; ".join(r.noise.get("reasons", ())),
        "torch_threads": _nan_if_none(r.conditions.get("torch_threads")),
    } for r in records])


def load_results(path: str | os.PathLike) -> pd.DataFrame:
    """Read a JSON Lines results file into a DataFrame (see records_to_frame)."""
    return records_to_frame(read_records(path))


def _nan_if_none(x) -> float:
    value = as_number(x)
    return math.nan if value is None else value


def _time_stats(times: tuple[float, ...]) -> dict:
    t = Timing(samples_ms=times, warmup=0, device="")
    return {name: getattr(t, name) if times else math.nan
            for name in ("median_ms", "iqr_ms", "min_ms")}
