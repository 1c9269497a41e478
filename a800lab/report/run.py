"""`a800lab report`'s runner: the battery measured point by point into `<out>/points.jsonl`,
then judged into report.json. Stopped (Ctrl-C, Stop, a crash, its time budget), the same call
resumes: only the points missing for this environment are measured.

    report = run_report("quick", out="report/", on_progress=lambda done, total, eta_s, what: ...)
"""

import dataclasses
import datetime
import functools
import json
import time
from collections.abc import Callable
from pathlib import Path

from ..core.backends import resolve_device
from ..core.cancel import Cancelled, CancelToken
from ..core.doctor import advice, build_report
from ..core.environment import environment, fingerprint
from ..core.noise import default_cpu_threads
from ..core.results import (
    Record,
    append_record,
    check_writable,
    done_keys,
    new_run_id,
    read_records,
)
from ..core.sweep import measure_point, thread_count
from ..workloads.health import health_report
from .claims import RUN
from .compare import POINTS_FILE, REPORT_FILE, REPORT_KIND
from .plan import (
    BATTERY_VERSION,
    BUDGET_S,
    CONFIRM,
    POINTS,
    Plan,
    Step,
    plan_battery,
    resolve_points,
)
from .rules import thresholds
from .verdicts import judge_claims

VERSION = 3
DEFAULT_PRICE_PER_GPU_HOUR_USD = 2.0
BUDGET_MARGIN = 1.5   # the default budget: the mode's, or 1.5x the battery's estimate if longer


def report_device(device: str = "auto") -> str:
    """The report's device: "auto" is the first GPU ("cuda:0") when there is one, else "cpu"."""
    device = resolve_device(device)
    return "cuda:0" if device == "cuda" else device


def _check_options(mode: str, budget_s, price) -> None:
    if mode not in BUDGET_S:
        raise ValueError(f"mode {mode!r}: use 'quick' or 'full'")
    for name, value in (("budget_s", budget_s), ("price_per_gpu_hour_usd", price)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                  or not value > 0):
            raise ValueError(f"{name}={value!r} must be a positive number of "
                             f"{'seconds' if name == 'budget_s' else 'US dollars'}")


def run_report(mode: str = "quick", out: str | Path = "report", *, device: str = "auto",
               budget_s: float | None = None,
               price_per_gpu_hour_usd: float = DEFAULT_PRICE_PER_GPU_HOUR_USD,
               torch_threads: int | None = None, plan: Plan | None = None,
               on_progress: Callable[[int, int, float | None, str], None] | None = None,
               on_record: Callable[[Record], None] | None = None,
               cancel: CancelToken | None = None) -> dict:
    """Measure the battery of `mode` (or your own `plan`) on `device` into `out`, resuming;
    return the report dict. `on_record(record)` for every point measured now."""
    _check_options(mode, budget_s, price_per_gpu_hour_usd)
    device = report_device(device)
    plan = plan or plan_battery(mode, device)
    budget_s = budget_s or max(BUDGET_S[mode], BUDGET_MARGIN * plan.estimate_s)
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--out {str(out)!r} is a file; give a directory for the report")
    folder.mkdir(parents=True, exist_ok=True)
    path = check_writable(folder / POINTS_FILE)
    if torch_threads is None and device == "cpu":
        torch_threads = default_cpu_threads()
    env = environment(device)
    env["fingerprint"] = fingerprint(env)
    current = [r for r in (read_records(path) if path.exists() else [])   # who won each step
               if r.env.get("fingerprint") == env["fingerprint"]
               and r.metrics.get("battery_version") == BATTERY_VERSION]
    run = _Run(plan, path, env, budget_s, done_keys(path, env["fingerprint"], key=_key),
               on_progress, on_record, cancel, current)
    with thread_count(torch_threads):
        try:
            run.measure_all()
        except KeyboardInterrupt:  # Ctrl-C: what was measured is in the file; report it
            run.stopped = "interrupted"
        except Cancelled:          # Stop mid-point
            run.stopped = "cancelled"
    return build(plan, folder, env, wall_s=run.wall_s, stopped=run.stopped,
                 price_per_gpu_hour_usd=price_per_gpu_hour_usd, run_id=run.run_id,
                 torch_threads=torch_threads)


def _key(record: Record) -> str:
    """A point's identity in the report folder: its step, the battery version that measured it
    (an earlier battery's points are measured again, never judged by today's rules), params."""
    version = record.metrics.get("battery_version", 1)
    return f"{record.label}|v{version}|{record.point_key()}"


def _planned(step: Step, params: dict) -> str:   # a planned point's _key
    return _key(Record(workload=step.workload, params=params, outcome="error", label=step.name,
                       metrics={"battery_version": BATTERY_VERSION}))


class _Run:
    """One invocation's walk over the plan: skip what is done, stop on budget or Stop. A
    confirmation step's point is its candidates' winner, known once they are measured."""

    def __init__(self, plan, path, env, budget_s, done, on_progress, on_record, cancel, records):
        self.plan, self.path, self.env, self.budget_s = plan, path, env, budget_s
        self.done, self.run_id, self.cancel = done, new_run_id(), cancel
        self.on_progress, self.on_record, self.records = on_progress, on_record, records
        self.stopped, self.count, self.started = "", 0, time.perf_counter()

    @property
    def wall_s(self) -> float:
        return time.perf_counter() - self.started

    def todo(self, step: Step) -> list[dict]:
        """`step`'s points not measured yet (a confirmation step's: its winner, if known)."""
        return [p for s, p in resolve_points(self.plan, self.records)
                if s is step and CONFIRM not in p and _planned(step, p) not in self.done]

    def measure_all(self) -> None:
        self.total = self.plan.points
        self.skipped = self.total - sum(CONFIRM in p or _planned(s, p) not in self.done
                                        for s, p in resolve_points(self.plan, self.records))
        self._progress(f"{self.skipped} point(s) already measured" if self.skipped else "start")
        for step in [s for s in self.plan.steps if not s.ranks]:
            if not self._measure(step):
                return
        self._comm([s for s in self.plan.steps if s.ranks])

    def _measure(self, step: Step, group=None) -> bool:
        """Measure `step`'s missing points (on `group`'s ranks for one on ranks); False: stopped."""
        for params in self.todo(step):
            if not self._go_on():
                return False
            run = {RUN: params[RUN]} if RUN in params else {}   # the battery's, not the point's
            point_params = {k: v for k, v in params.items() if k != RUN}
            if step.ranks:
                from ..workloads.comm.runs import run_comm

                records = run_comm(step.workload, {k: [v] for k, v in point_params.items()},
                                   world_size=step.ranks, backend=step.points[0]["backend"],
                                   settings=step.settings, label=step.name, run_id=self.run_id,
                                   group=group, resume=False, cancel=self.cancel).records
            else:
                point = functools.partial(POINTS[step.workload], **step.settings)
                records = [measure_point(point, point_params, workload=step.workload,
                                         device=self.plan.device, env=self.env, label=step.name,
                                         cancel=self.cancel, run_id=self.run_id)]
            for record in records:
                record = dataclasses.replace(record, params={**record.params, **run}, metrics={
                    **record.metrics, "battery_version": BATTERY_VERSION})
                append_record(self.path, record)
                self.records.append(record)
                self.done.add(_key(record))
                self.count += 1
                if self.on_record:
                    self.on_record(record)
                self._progress(f"{step.name}: {record.outcome}")
        return True

    def _go_on(self) -> bool:
        if self.cancel is not None and self.cancel.cancelled:
            self.stopped = "cancelled"
        elif self.count and self.wall_s >= self.budget_s:  # every sitting measures a point
            self.stopped = "budget"
        return not self.stopped

    def _progress(self, what: str) -> None:
        if self.on_progress:
            done = self.skipped + self.count
            eta = self.wall_s / self.count * max(0, self.total - done) if self.count else None
            self.on_progress(done, self.total, eta, what)

    def _comm(self, steps: list[Step]) -> None:
        """The steps on ranks: one rank group per (world size, backend: NCCL on GPUs, gloo on a
        CPU), started once for every step that runs on it (starting one costs seconds)."""
        from ..workloads.comm.runs import start_ranks

        groups: dict[tuple, list[Step]] = {}
        for step in steps:
            groups.setdefault((step.ranks, step.points[0]["backend"]), []).append(step)
        for (ranks, backend), group_steps in groups.items():
            if not any(self.todo(s) for s in group_steps) or not self._go_on():
                continue
            group = start_ranks(ranks, backend)
            try:
                if not all(self._measure(step, group) for step in group_steps):
                    return
            finally:
                group.close()


def build(plan: Plan, folder: str | Path, env: dict, *, wall_s: float = 0.0, stopped: str = "",
          price_per_gpu_hour_usd: float = DEFAULT_PRICE_PER_GPU_HOUR_USD, run_id: str = "",
          torch_threads: int | None = None) -> dict:
    """The report dict of `folder`'s points for this environment, also written to
    `folder`/report.json; its wall time covers every sitting that measured its points."""
    folder = Path(folder)
    all_records = read_records(folder / POINTS_FILE) if (folder / POINTS_FILE).exists() else []
    records = [r for r in all_records if r.env.get("fingerprint") == env["fingerprint"]]
    current = [r for r in records if r.metrics.get("battery_version") == BATTERY_VERSION]
    planned = {_planned(s, p) for s, p in resolve_points(plan, current)}
    newest = {_key(r): r for r in records if _key(r) in planned}
    name = str(env.get("device_name") or env.get("cpu_model") or env.get("device"))
    facts = judge_claims(newest.values(), plan, device_name=name,
                         price_per_gpu_hour_usd=price_per_gpu_hour_usd)
    doctor = build_report()
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    sessions = _earlier_sessions(folder, env["fingerprint"], {r.run_id for r in records}) + [
        {"run_id": run_id, "finished": now, "wall_s": wall_s, "stopped": stopped,
         "torch_threads": torch_threads}]
    ok = sum(r.outcome == "ok" for r in newest.values())
    notes = [f"{len(all_records) - len(records)} record(s) in {POINTS_FILE} come from another "
             "environment (machine, driver or software) and were left out; use a new --out "
             "folder per machine"] if len(all_records) > len(records) else []
    report = {
        "kind": REPORT_KIND, "report_version": VERSION, "mode": plan.mode, "created": now,
        "wall_s": sum(s["wall_s"] for s in sessions), "sessions": sessions,
        "device": plan.device, "device_name": name, "scope": env["mode"],
        "complete": len(newest) == len(planned), "stopped": stopped,
        "points": {"planned": len(planned), "measured": len(newest), "ok": ok,
                   "failed": len(newest) - ok, "not_measured": len(planned) - len(newest)},
        "results_file": POINTS_FILE, "price_per_gpu_hour_usd": price_per_gpu_hour_usd,
        "environment": env, "doctor": doctor, "notes": notes,
        **facts, "thresholds": thresholds(), "plan": plan.to_dict(),
    }
    report["health"]["advice"] = advice(doctor)
    report["health"]["memory"] = health_report()
    (folder / REPORT_FILE).write_text(json.dumps(report, indent=1, default=str) + "\n")
    return report


def _earlier_sessions(folder: Path, env_fingerprint: str, run_ids: set[str]) -> list[dict]:
    """The sittings of an earlier report.json of this environment whose points (`run_ids`) stay."""
    try:
        earlier = json.loads((folder / REPORT_FILE).read_text())
    except (OSError, ValueError):
        return []
    if (not isinstance(earlier, dict) or earlier.get("kind") != REPORT_KIND
            or (earlier.get("environment") or {}).get("fingerprint") != env_fingerprint):
        return []
    return [s for s in earlier.get("sessions", [])
            if isinstance(s, dict) and "wall_s" in s and s.get("run_id") in run_ids]
