"""What the command families share: the option table (each option declared once, with the check
argparse cannot make, run by `main` before the command), a sweep's run loop and the printers.

    add_options(parser, "SHAPE+ precision+ SWEEP", precision={"default": ["fp32"]})
    add_options(parser, "accum_steps+ LEVERS+ RUN", spec=lambda: TrainSpec)  # its fields
"""

import json
import math
import sys
from pathlib import Path

from ..core.backends import resolve_device
from ..core.cancel import Cancelled
from ..core.checks import positive_int
from ..core.knobs import knobs
from ..core.noise import default_cpu_threads
from ..core.results import check_folder, check_writable
from ..core.sweep import run_sweep, thread_count
from ..core.units import format_bytes
from ..workloads import matmul

BUNDLES = {"RUN": "device budget_s threads out", "SWEEP": "RUN no_resume telemetry",
           "SHAPE": "size m n k", "TILES": "backend LEVERS+"}  # TILES: MatmulSpec's
# `BUNDLE+`: each of them takes a list; LEVERS: the spec's fields declared as levers
OFF_ON = ["off", "on"]


class Stopped(Exception):
    """Ctrl-C or a cancel mid-run: `main` prints the message (what was kept) and exits 130."""


def refuse(ok, message: str):
    """A check: the value if ok(value), else ValueError(message with the value)."""
    def check(value):
        if not ok(value):
            raise ValueError(message.format(value))
        return value
    return check


def _writable(path: str) -> str:
    check_writable(path)
    return path


def _folder(path: str) -> str:
    check_folder(path, "--out")
    return path


def positive(value) -> bool:
    return math.isfinite(value) and value > 0


FLAG = {"action": "store_true"}
OPTIONS = {  # option -> add_argument's keywords; `check(value)`: the value kept, or ValueError
    "device": dict(default="auto", help="auto, cpu or cuda[:N]", check=resolve_device),
    "budget_s": dict(type=float, default=0.3, help="timing budget per point", check=refuse(
        positive, "--budget-s {} must be a finite number of seconds > 0, e.g. 0.3")),
    "threads": dict(type=int, check=refuse(lambda n: n >= 1, "--threads {} must be at least 1"),
                    help="torch CPU threads during the run (default on CPU: all usable cores "
                         "but one; on a GPU: torch's own)"),
    "out": dict(required=True, help="JSON Lines file to append to", check=_writable),
    "no_resume": dict(FLAG, help="re-measure points in --out"),
    "telemetry": dict(FLAG, help="sample NVML during each point"),
    "json": dict(FLAG, help="print JSON instead of text"),
    "store": dict(help="tuned-config file (default $A800LAB_TUNED or ~/.cache/a800lab/"
                       "tuned.json)"),
    "force": dict(FLAG, help="tune even when a result is stored"),
    "size": dict(type=int, help="square problems m=n=k"),  # a matmul's shape: m, n, k its spec's
    # a training step, a model served (their spec fields are the other options)
    "user_model": dict(help="your model: a .py file (or module) defining make_model() and "
                            "make_batch(batch_size), optionally loss_fn(outputs, targets)"),
    "train_steps": dict(type=int, check=refuse(lambda n: n >= 1,
                                                "--train-steps {} must be at least 1")),
    "target_batch": dict(type=int, help="the effective batch every candidate trains with",
                         check=lambda n: positive_int("target_batch", n, "1024")),
    "limit_mib": dict(type=float, check=refuse(positive, "--limit-mib {} must be a number of "
                                                         "MiB > 0"),
                      help="memory to fit in, MiB (default: 256 on a CPU, the GPU's free memory; "
                           "smaller on a GPU plans for a smaller card)"),
    "margin": dict(type=float, help="share of the limit kept free (default 0.1)", check=refuse(
        lambda x: 0 <= x < 1, "--margin {} must be in [0, 1), e.g. 0.1")),
}
FOLDER = {"required": False, "check": _folder}  # an --out that is a folder


def _names(names: str, bundles: dict) -> list[str]:
    out = []  # the bundles spelt out
    for name in names.split():
        key, plus = name.rstrip("+"), name[len(name.rstrip("+")):]
        out += [n + plus for n in _names(bundles[key], bundles)] if key in bundles else [name]
    return out


def knob_option(field_name: str, declared) -> dict:
    """add_argument's keywords for a spec field's Knob: its help, type, choices and check (the
    spec's own: on/off become True/False)."""
    def check(value):
        items = value if isinstance(value, list) else [value]
        checked = [declared.check(field_name, OFF_ON.index(v) == 1 if declared.is_bool else v)
                   for v in items]
        return checked if isinstance(value, list) else checked[0]
    kwargs = {"help": declared.describe(), "check": check}
    if declared.is_bool:
        kwargs["choices"] = OFF_ON
    elif not declared.choices and declared.canon is None:
        kwargs["type"] = int if declared.integer else float
    return kwargs


def add_options(parser, names: str, spec=None, **own) -> None:
    """The options named, in order (`name+` takes a list): the table's, or a field of the spec
    class `spec()` returns (LEVERS: its levers), adjusted by the `own` keyword of the same name
    (add_argument's keywords, or a help text), or the command's own."""
    classes = spec() if spec else ()  # a tuple of classes: a later class's field wins
    declared = {k.cli or name: (name, k) for one in (classes if isinstance(classes, tuple)
                                                     else (classes,))
                for name, k in knobs(one).items()}
    levers = " ".join(option for option, (_, k) in declared.items() if k.lever)
    names = _names(names, {**BUNDLES, "LEVERS": levers})
    if set(own) - {name.rstrip("+") for name in names}:
        raise TypeError(f"not named in {names}: {sorted(own)}")
    for name in names:
        key = name.rstrip("+")
        extra = own.get(key, {})
        base = knob_option(*declared[key]) if key in declared else OPTIONS.get(key, {})
        kwargs = {**base, **({"help": extra} if isinstance(extra, str) else extra)}
        if name != key:
            kwargs["nargs"] = "+"
        check = kwargs.pop("check", None)
        if check is not None:
            parser.get_default("checks")[key] = check
        parser.add_argument("--" + key.replace("_", "-"), **kwargs)


def run_checks(args, skip: tuple = ()) -> None:
    """The options' own checks, each given value replaced by the one it keeps (ValueError)."""
    for dest, check in args.checks.items():
        if dest not in skip and getattr(args, dest) is not None:
            setattr(args, dest, check(getattr(args, dest)))


def field_value(args, spec_class, name: str, many: bool = False):
    """A spec field's option value (its values, once each, when `many`), else the field's
    default on the device."""
    declared = knobs(spec_class)[name]
    value = getattr(args, declared.cli or name, None)
    value = declared.default_for(args.device) if value is None else value
    value = value if isinstance(value, list) else [value]
    return list(dict.fromkeys(value)) if many else value[0]


def store_path(store: str | None) -> str:
    """--store (default: the tuned-config file) when the tuned configs can be written to it."""
    from ..core.store import tuned_store_path

    path = store or tuned_store_path()
    if Path(path).is_dir():
        raise ValueError(f"--store {path} is a folder; give a file, e.g. "
                         f"--store {Path(path) / 'tuned.json'}")
    try:
        check_writable(path)
    except ValueError as exc:
        raise ValueError(f"--store: {exc}") from None
    return path


def say_reused(entry: dict, store) -> None:
    print(f"reused the result tuned at {entry['tuned_at']} from {store} (--force tunes again)",
          file=sys.stderr)


def answer(outcome, as_json: bool, answer: dict) -> int:
    """A tuner's summary, its code to paste and (`--json`) `answer`; exit 1 without a winner."""
    print(outcome.summary())
    if outcome.winner is not None:
        print("\n# the code to paste:\n" + outcome.snippet)
    if as_json:
        print(json.dumps(answer, indent=1))
    return 0 if outcome.winner is not None else 1


def threads_for(args) -> int | None:
    """--threads, else on CPU all usable cores but one (said on stderr), else torch's own."""
    if args.threads is not None or args.device != "cpu":
        return args.threads
    threads = default_cpu_threads()
    print(f"CPU: {threads} torch thread(s), a core left for the rest of the machine "
          "(--threads N to change)", file=sys.stderr)
    return threads


def stoppable(args, work, stopped: str):
    """work() under the run's torch threads; Ctrl-C ends it with `stopped` (exit 130)."""
    try:
        with thread_count(threads_for(args)):
            return work()
    except (KeyboardInterrupt, Cancelled):
        raise Stopped(stopped) from None


def kept(out) -> str:
    return f"; the trials are in {out}" if out else ""


def shape_axes(args) -> dict:
    """{"size": [...]} or {"m": [...], "n": [...], "k": [...]} from the shape options."""
    given = {name: getattr(args, name) for name in ("size", "m", "n", "k")
             if getattr(args, name) is not None}  # 0 is a value (refused later), not "absent"
    if "size" in given and len(given) > 1:
        args.command_parser.error("give either --size (square) or --m/--n/--k, not both")
    if "size" in given:
        return {"size": given["size"]}
    if len(given) == 3:
        return given
    args.command_parser.error("give --size, or all of --m, --n and --k")


def cpu_notes(precisions, device: str) -> None:
    """On a CPU, say up front which precisions will be slow there."""
    for note in [matmul.cpu_slowdown_note(p) for p in precisions] if device == "cpu" else ():
        if note:
            print(f"note: {note}", file=sys.stderr)


def show_progress(done: int, total: int, eta_s: float | None, what: str = "") -> None:
    eta = "" if eta_s is None else f", about {eta_s:.0f} s left"
    print(f"[{done}/{total}{eta}]" + (f" {what}" if what else ""), file=sys.stderr)


def show_record(record) -> None:
    """One line per point: (label,) params, outcome, rate, latency percentiles, spread; when
    noisy `!`, the reasons."""
    line = f"  {record.label + ' ' if record.label else ''}{record.params}: {record.outcome}"
    if record.throughput:
        line += f" {record.throughput:.3g} {record.throughput_unit}"
    if record.metrics.get("offered_rate") is not None:
        line += f" of {record.metrics['offered_rate']:.3g} requests/s offered"
    for low, high, label in (("p50_ms", "p99_ms", ""), ("ttft_p50_ms", "ttft_p99_ms", "TTFT "),
                             ("tpot_p50_ms", "tpot_p99_ms", "TPOT ")):
        if record.outcome == "ok" and None not in (record.metrics.get(low),
                                                   record.metrics.get(high)):
            line += f", {label}p50 {record.metrics[low]:.3g} ms p99 {record.metrics[high]:.3g} ms"
    if record.metrics.get("saturated"):
        line += " SATURATED"
    if record.noise.get("iqr_over_median") is not None:
        line += f" (IQR {100 * record.noise['iqr_over_median']:.0f}% of median)"
    if record.message:
        line += f" {record.message}"
    if record.noise.get("noisy"):
        line = "!" + line[1:] + "\n    ! " + "\n    ! ".join(record.noise["reasons"])
    print(line, file=sys.stderr)


def show_trial(trial) -> None:
    """One line per max-batch trial: stage, micro-batch x accumulation, outcome, peak."""
    peak = "" if trial.peak_bytes is None else f" peak {format_bytes(trial.peak_bytes)}"
    predicted = "" if trial.predicted_bytes is None else \
        f" (predicted {format_bytes(trial.predicted_bytes)})"
    message = f" {trial.message}" if trial.message and trial.outcome != "ok" else ""
    print(f"  {trial.stage} {trial.batch_size} x {trial.accum_steps}: {trial.outcome}{peak}"
          f"{predicted}{message}", file=sys.stderr)


def summary_line(res, out) -> str:
    noisy = sum(bool(r.noise.get("noisy")) for r in res.records)
    flagged = f", {noisy} noisy (marked !)" if noisy else ""
    return f"{len(res.records)} points measured{flagged}, {res.skipped} already in {out}"


def run_sweep_command(point, axes: dict, args, *, workload: str, fixed: dict | None = None):
    """A sweep's run: a line per point appended to --out, then the summary (Ctrl-C: 130)."""
    try:
        res = run_sweep(point, axes, fixed=fixed, workload=workload, out=args.out,
                        device=args.device, resume=not args.no_resume,
                        sample_telemetry=args.telemetry, torch_threads=threads_for(args),
                        on_progress=show_progress, on_result=show_record)
    except (KeyboardInterrupt, Cancelled):
        raise Stopped(f"stopped; every finished point is in {args.out}") from None
    print(summary_line(res, args.out), file=sys.stderr)
    return 0
