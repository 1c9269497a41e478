"""Run every GPU path of a800lab briefly on a real GPU, judge each, write one JSON report.

On a lent GPU machine, from the repository root, on that machine's own stack as found (Python
3.12, torch 2.11 with CUDA 13, triton 3.6, nvidia-ml-py, pandas, numpy, matplotlib; no
ipywidgets, no JupyterLab, no network; nothing to install):

    python3 scripts/gpu_check.py --plan          # anywhere, no GPU needed: the stages, their
                                                 # estimates and worst cases, the commands
    python3 scripts/gpu_check.py --stage 1       # one stage: a 250 s budget, a wall at 265 s
    python3 scripts/gpu_check.py --stage 1 3     # two stages the plan says may share a command
    python3 scripts/gpu_check.py --only tiles    # named checks (their stage's budget)
    python3 scripts/gpu_check.py --rehearse      # no GPU needed: see scripts/gpu_rehearsal.py

The stages run the most telling checks first: 1 the harness and the tile lab (device and doctor,
timing against triton's do_bench, peaks, the compile-only facts against the JIT, the tile kernel
against cuBLAS, AMP training and memory, out-of-memory, a recorded matmul sweep), 2 the systems
checks and the training step (profile, levers, tuner), 3 the serving lab (its compiled path
included), then the `gpu`-marked tests with the time the stage has left. The plan says which two
stages may share one 600 s command at their worst, and which may not; all three in one command
(no --stage) can pass 600 s at worst. Each check states its expectation (a healthy card meets it),
measures, and passes or fails, one line each ("PASS timing: measure()/do_bench 0.98 (expect
0.9-1.1)"). A figure whose right value is not known (2:4 speed-up on Hopper, fp8 with precise
accumulation) is recorded with what it means, never judged by a guessed floor. Checks are
independent; the report is rewritten after every check, so a crash or a kill keeps what was
measured; a check that would not fit in its stage's time left is recorded as "not run" with that
reason. Exit status: 0 all passed or skipped, 1 a check
failed or there is no GPU, 3 the budget left checks not run.

The report goes to data/gpu_check-<device>-<date>.json (device, driver, CUDA, torch and Triton
versions in its "environment"), and a copy to $OUT when that is set (what a lent machine sends
back); a later stage on the same machine adds its checks to that file. Commit it under data/.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(REPO), str(HERE)]

from gpu_checks_device import (  # noqa: E402
    Failed,
    check_device,
    check_doctor,
    check_memory,
    check_oom,
    check_peak,
    check_sampler,
    check_tf32,
    check_timing,
    check_topology,
    data_file,
    expect_between,
    parse_topo_matrix,
)
from gpu_checks_labs import (  # noqa: E402
    check_comm,
    check_energy,
    check_gpu_tests,
    check_health,
    check_hopper_tiles,
    check_overlap,
    check_record,
    check_sparsity,
    check_tiles,
    check_training,
)
from gpu_checks_serving import (  # noqa: E402
    check_concurrency,
    check_decode,
    check_generate,
    check_serve_compile,
    check_serve_load,
    check_serve_tune,
    check_serving,
)
from gpu_checks_training import check_levers, check_profile, check_tune  # noqa: E402

from a800lab.core.backends import HAS_CUDA, why_unavailable  # noqa: E402
from a800lab.core.environment import environment, fingerprint  # noqa: E402

__all__ = ["CHECKS", "STAGES", "Check", "Failed", "expect_between", "main", "parse_topo_matrix",
           "plan_text", "run_check"]

class Check(NamedTuple):
    """A check, its estimate on one H100/H200 (compiles included: a check starts only while
    its estimate fits the time left) and its worst case (None: it takes what is left)."""

    run: Callable[[], tuple[str, dict]]
    estimate_s: int
    worst_s: int | None


# estimates and worst cases are reasoned, not yet measured on a card (data/ has no report):
# compiles dominate (Triton tiles, Inductor), and a cold cache or a slow host CPU doubles them
CHECKS: dict[str, Check] = {
    "doctor": Check(check_doctor, 5, 10), "device": Check(check_device, 6, 15),
    "timing": Check(check_timing, 10, 20), "tf32": Check(check_tf32, 3, 6),
    "peak": Check(check_peak, 15, 25), "tiles": Check(check_tiles, 25, 45),
    "hopper_tiles": Check(check_hopper_tiles, 25, 45), "training": Check(check_training, 25, 40),
    "memory": Check(check_memory, 15, 25), "oom": Check(check_oom, 5, 10),
    "record": Check(check_record, 20, 30), "sampler": Check(check_sampler, 5, 8),
    "topology": Check(check_topology, 2, 5), "sparsity": Check(check_sparsity, 10, 20),
    "energy": Check(check_energy, 5, 8), "health": Check(check_health, 15, 30),
    "overlap": Check(check_overlap, 8, 15), "comm": Check(check_comm, 15, 30),
    "profile": Check(check_profile, 25, 45),
    # levers: Inductor + CUDA graphs of a training step, 35-90 s by the review's reckoning
    "levers": Check(check_levers, 60, 90), "tune": Check(check_tune, 40, 60),
    "serving": Check(check_serving, 25, 40),
    # one reduce-overhead compile of the medium Transformer's inference, Inductor cold
    "serve_compile": Check(check_serve_compile, 35, 90),
    "decode": Check(check_decode, 15, 20), "concurrency": Check(check_concurrency, 20, 35),
    "serve_tune": Check(check_serve_tune, 20, 35),
    # five graph captures, a capacity and 3 s of load; two 3 s generation points
    "serve_load": Check(check_serve_load, 12, 20), "generate": Check(check_generate, 15, 25),
    "gpu_tests": Check(check_gpu_tests, 90, None),  # given its stage's time left, last
}
STAGES: dict[int, tuple[str, list[str]]] = {
    1: ("the harness and the tile lab", ["doctor", "device", "timing", "tf32", "peak", "tiles",
                                          "hopper_tiles", "training", "memory", "oom",
                                          "record"]),
    # the offline serving tuner last in stage 2: stage 3's serving checks (under load first)
    # must fit its budget before the gpu tests
    2: ("systems, the training step and the offline serving tuner", [
        "sampler", "topology", "sparsity", "energy", "health", "overlap", "comm", "profile",
        "levers", "tune", "serve_tune"]),
    3: ("the serving lab, then the gpu-marked tests", ["serving", "serve_load", "generate",
                                                       "serve_compile", "decode",
                                                       "concurrency", "gpu_tests"]),
}
STAGE_BUDGET_S = 250.0  # three stages at their walls, the starts and the machine's: the lease
PROCESS_START_S = 10   # python, torch, the CUDA context and the lab, before the first check
MACHINE_START_S = 75   # a lent machine's start-up ("a minute or more"), once per lease
LEASE_S = 900          # a lent machine's device time (15 minutes), its start-up included
COMMAND_S = 600        # the most one command may run there
TRANSFER_S = 30        # a command's copies to and from the machine, within its 600 s
WALL_MARGIN_S = 15.0   # a check still running this long after its stage's budget is stopped


class OverBudget(BaseException):
    """Raised in a check that is still running past the budget's hard wall."""


def _stop_at_the_wall(signum, frame):
    raise OverBudget("stopped: still running at the time budget's hard wall")


def stage_estimate_s(stage: int) -> int:
    return PROCESS_START_S + sum(CHECKS[name].estimate_s for name in STAGES[stage][1])


def stage_worst_s(stage: int, budget_s: float = STAGE_BUDGET_S) -> int:
    """The stage's worst case: every check at its worst; a check that takes what is left
    (the gpu tests) fills the stage to its budget."""
    names = STAGES[stage][1]
    fixed = PROCESS_START_S + sum(CHECKS[n].worst_s or 0 for n in names)
    filling = any(CHECKS[n].worst_s is None for n in names)
    return int(max(fixed, PROCESS_START_S + budget_s)) if filling else fixed


def shared_worst_s(pair: tuple[int, int]) -> int:
    """Two stages in one command at their worst (one process start)."""
    return sum(stage_worst_s(n) for n in pair) - PROCESS_START_S


def plan_text() -> str:
    """The stages (estimates, worst cases, commands), which two may share one command, and the
    total against the lease: printable anywhere, a GPU or not."""
    lines, limit = [], COMMAND_S - TRANSFER_S
    for number, (title, names) in STAGES.items():
        worst = stage_worst_s(number)
        over = (": past its budget, its last checks are recorded as not run"
                if worst > PROCESS_START_S + STAGE_BUDGET_S else "")
        checks = ", ".join(f"{n} {CHECKS[n].estimate_s}-{CHECKS[n].worst_s or 'rest'}"
                           for n in names)
        lines.append(f"stage {number} ({title}): ~{stage_estimate_s(number)} s, at worst "
                     f"~{worst} s{over}; budget {STAGE_BUDGET_S:g} s [start {PROCESS_START_S};"
                     f" {checks}]\n    python3 scripts/gpu_check.py --stage {number}    "
                     f"(timeout_s {int(STAGE_BUDGET_S + WALL_MARGIN_S + 30)})")
    pairs = list(itertools.combinations(STAGES, 2))
    may = [p for p in pairs if shared_worst_s(p) <= limit]
    lines.append(f"one {COMMAND_S} s command holds two stages when their worst cases add up to "
                 f"<= {limit} s (one start; {TRANSFER_S} s for the copies): " + "; ".join(
                     f"{a} and {b} {'may' if (a, b) in may else 'may not'} "
                     f"(~{shared_worst_s((a, b))} s"
                     + (f": --stage {a} {b}, timeout_s {COMMAND_S})" if (a, b) in may else ")")
                     for a, b in pairs))
    typical = MACHINE_START_S + sum(map(stage_estimate_s, STAGES))
    worst = MACHINE_START_S + sum(map(stage_worst_s, STAGES))
    walls = MACHINE_START_S + len(STAGES) * int(PROCESS_START_S + STAGE_BUDGET_S +
                                                 WALL_MARGIN_S)
    lines.append(f"lease: ~{typical} s of device time with the machine's start-up "
                 f"(~{MACHINE_START_S} s), ~{worst} s if every check took its worst, against "
                 f"{LEASE_S} s; the budgets and walls hold it to {walls} s (a stage past its "
                 "budget records its last checks as not run); the machine is given back 30 s "
                 "after a command ends, so send the next at once")
    return "\n".join(lines)


def run_check(check: Callable[[], tuple[str, dict]]) -> dict:
    """{"status": pass | fail | skip | error, "expect", "summary", "details", "duration_s"}."""
    t0 = time.perf_counter()
    result = {"expect": " ".join((check.__doc__ or "").split())}
    try:
        summary, details = check()
        status = "skip" if summary.startswith("skip:") else "pass"
        result.update(status=status, summary=summary, details=details)
    except (Failed, OverBudget) as exc:
        result.update(status="fail", summary=str(exc))
    except Exception as exc:  # a crash is a failed expectation too, with its traceback
        result.update(status="error", summary=f"{type(exc).__name__}: {exc}",
                      traceback=traceback.format_exc())
    result["duration_s"] = round(time.perf_counter() - t0, 2)
    return result


def record_report(folder: Path) -> dict:
    """`a800lab report --quick` on cuda:0 into `folder` (points.jsonl, report.json/.html):
    judged complete, every point measured without an error, every claim given a verdict."""
    from a800lab.report.html import write_report_html
    from a800lab.report.run import run_report

    t0 = time.perf_counter()
    report = run_report("quick", folder, device="cuda:0", on_progress=lambda done, total, eta,
                        what: print(f"  [report {done}/{total}] {what}", flush=True))
    write_report_html(report, folder / "report.html")
    errors = [c for c in report["claims"] if not c["status"]]
    status = "pass" if report["complete"] and not report["points"]["failed"] and not errors \
        else "fail"
    return {"status": status, "wall_s": round(time.perf_counter() - t0, 1),
            "points": report["points"], "folder": str(folder),
            "verdicts": {c["id"]: c["status"] for c in report["claims"]},
            "flags": report["health"]["flags"]}


def default_out(device_name: str) -> Path:
    """data/gpu_check-<device>-<date>.json, e.g. data/gpu_check-nvidia-h200-2026-11-20.json."""
    return data_file("gpu_check", device_name, ".json")


def _write(paths: list[Path], report: dict) -> None:
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(report, indent=2, default=str))
        os.replace(tmp, path)  # a kill mid-write leaves the previous report


def _earlier(path: Path, env_fingerprint: str) -> dict:
    """The checks an earlier stage on this machine wrote to `path` ({} for another machine)."""
    try:
        earlier = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return earlier.get("checks", {}) if earlier.get("fingerprint") == env_fingerprint else {}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"Stages (at most {STAGE_BUDGET_S:g} s each by estimate):\n{plan_text()}\n"
               "Exit: 0 passed, 1 failed or no GPU, 3 budget.")
    parser.add_argument("--plan", action="store_true",
                        help="print the stages, their estimates and commands; run nothing")
    parser.add_argument("--stage", type=int, nargs="+", choices=list(STAGES), metavar="N",
                        help=f"run these stages ({', '.join(map(str, STAGES))}; default all)")
    parser.add_argument("--only", nargs="+", choices=list(CHECKS), metavar="CHECK",
                        help=f"run only these ({', '.join(CHECKS)})")
    parser.add_argument("--skip", nargs="+", choices=list(CHECKS), default=[], metavar="CHECK",
                        help="leave these out")
    parser.add_argument("--budget-s", type=float, default=STAGE_BUDGET_S,
                        help=f"each stage starts no check that would end after this "
                             f"(default {STAGE_BUDGET_S:g})")
    parser.add_argument("--out", type=Path, default=None,
                        help="report file (default data/gpu_check-<device>-<date>.json, and a "
                             "copy in $OUT when set)")
    parser.add_argument("--list", action="store_true", help="print each check's expectation")
    parser.add_argument("--rehearse", action="store_true",
                        help="no GPU: import every check, collect the gpu tests and compile "
                             "every tile launch for sm_80 and sm_90 (facts == JIT)")
    parser.add_argument("--report", type=Path,
                        help="also run `a800lab report --quick` into this folder (~2 minutes)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.plan:
        print(plan_text())
        return 0
    if args.list:
        for name, (check, seconds, worst) in CHECKS.items():
            print(f"{name} (~{seconds} s, at worst {worst or 'what its stage has left'}"
                  f"{' s' if worst else ''}): {' '.join(check.__doc__.split())}")
        return 0
    if args.rehearse:
        from gpu_rehearsal import rehearse

        return rehearse()
    env = environment("cuda:0" if HAS_CUDA else "cpu")
    out = args.out or default_out(env.get("device_name", "") if HAS_CUDA else "no-gpu")
    paths = [out] + ([Path(os.environ["OUT"]) / out.name] if os.environ.get("OUT") and
                     args.out is None else [])
    report = {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "command": " ".join(["python3", "scripts/gpu_check.py", *(argv or sys.argv[1:])]),
              "budget_s": args.budget_s, "environment": env, "fingerprint": fingerprint(env),
              "checks": {}}
    if not HAS_CUDA:  # nothing measured: data/ gets no file unless --out asks for one
        report["error"] = f"no CUDA device: {why_unavailable('cuda')}"
        print(f"FAIL  gpu_check: {report['error']}")
        _write([args.out] if args.out else [], report)
        return 1
    report["checks"] = _earlier(out, report["fingerprint"])
    ran: list[str] = []
    signal.signal(signal.SIGALRM, _stop_at_the_wall)
    for number in args.stage or list(STAGES):
        names = [n for n in STAGES[number][1] if (not args.only or n in args.only)
                 and n not in args.skip]
        if names:
            ran += _run_stage(number, names, args.budget_s, report, paths)
    signal.alarm(0)
    if args.report:
        report["checks"]["report"] = result = record_report(args.report)
        ran.append("report")
        print(f"{result['status'].upper():<5} report: {result['points']} in "
              f"{result['wall_s']} s; {args.report}/report.html", flush=True)
    statuses = {n: report["checks"][n]["status"] for n in ran}
    report["failed"] = [n for n, s in statuses.items() if s in ("fail", "error")]
    report["not_run"] = [n for n, s in statuses.items() if s == "not run"]
    _write(paths, report)
    print(f"[gpu_check] {sum(s in ('pass', 'skip') for s in statuses.values())}/{len(statuses)} "
          f"checks passed or skipped, {len(report['not_run'])} not run; report written to "
          f"{', '.join(map(str, paths))}")
    return 1 if report["failed"] else 3 if report["not_run"] else 0


def _run_stage(number: int, names: list[str], budget_s: float, report: dict,
               paths: list[Path]) -> list[str]:
    """Run one stage's checks within `budget_s`, writing the report after each."""
    started = time.perf_counter()
    signal.alarm(int(budget_s + WALL_MARGIN_S))
    print(f"[gpu_check] stage {number}: {STAGES[number][0]} (~{stage_estimate_s(number)} s)",
          flush=True)
    for name in names:
        check, seconds, _ = CHECKS[name]
        left = budget_s - (time.perf_counter() - started)
        if seconds > left:
            report["checks"][name] = {"status": "not run", "stage": number, "expect": " ".join(
                check.__doc__.split()), "summary": f"not run: it takes ~{seconds} s and "
                f"{max(left, 0):.0f} s of the {budget_s:g} s budget were left"}
            print(f"SKIP  {name}: {report['checks'][name]['summary']}", flush=True)
            _write(paths, report)
            continue
        print(f"[gpu_check] {name} (~{seconds} s, {left:.0f} s left) ...", flush=True)
        call = (lambda left=left: check_gpu_tests(timeout_s=max(30.0, left - 5))) \
            if check is check_gpu_tests else check
        result = run_check(call)
        result.update(stage=number, expect=" ".join(check.__doc__.split()))
        report["checks"][name] = result
        print(f"{result['status'].upper():<5} {name}: {result['summary']} "
              f"({result['duration_s']} s)", flush=True)
        _write(paths, report)  # after every check: a crash keeps what was measured
    signal.alarm(0)
    return names


if __name__ == "__main__":
    sys.exit(main())
