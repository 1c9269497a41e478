"""`python -m a800lab report`: the battery, its HTML and JSON report, and two reports compared;
exits 0 when the battery is complete, 3 when its time budget left points unmeasured (run it
again to resume), 130 on Ctrl-C (the partial report is still written) and 2 on bad input."""

import json
import sys
import textwrap
from pathlib import Path

from ..report.claims import LOOKS, STATUSES
from .options import FOLDER, add_options, show_progress, show_record

WIDTH = 100


def add_parsers(commands) -> None:
    report = commands.add("report", run=report_command,
                          help="test the tuning guide's claims and this machine's health; "
                               "write an HTML and a JSON report")
    size = report.add_mutually_exclusive_group()
    size.add_argument("--quick", dest="mode", action="store_const", const="quick",
                      help="the quick battery, about 8 minutes on one GPU by its estimate, "
                           "30-40 s on a CPU (the default)")
    size.add_argument("--full", dest="mode", action="store_const", const="full",
                      help="the full battery, about 16 minutes on one GPU by its estimate")
    size.add_argument("--compare", nargs=2, metavar=("A", "B"), default=None,
                      help="two report folders side by side: environment diff, B/A of every "
                           "figure, the verdicts")
    size.add_argument("--register", action="store_true",
                      help="print the claim register (every claim: the guide's sentence ids, "
                           "its words, readings and rule) as a Markdown table, or JSON with "
                           "--json, and measure nothing")
    size.add_argument("--tf-env", action="store_true",
                      help="prepare TensorFlow's own venv for the guide's TensorFlow snippets "
                           "(~/.cache/a800lab/tf-venv, $A800LAB_TF_VENV; tensorflow-cpu, or "
                           "tensorflow[and-cuda] on a GPU box): minutes, once")
    add_options(report, "out device budget_s price_per_gpu_hour threads json",
                out={**FOLDER, "help": "folder for the report (default: report/; with "
                                       "--compare: report-compare/)"},
                device="auto (cuda:0, else cpu), cpu, cuda:N",
                budget_s={"default": None, "check": None, "help": "stop starting new points "
                          "after this many seconds (default: quick 120, full 1200); run again "
                          "to resume"},
                price_per_gpu_hour={"type": float, "default": 2.0, "help": "US dollars per "
                                    "GPU-hour, for the cost per million samples (2.0)"},
                json="print the report (or the comparison) as JSON on stdout")


def report_command(args) -> int:
    if args.compare and (args.budget_s is not None or args.threads is not None):
        args.command_parser.error("--budget-s and --threads apply to running a report, not "
                                  "to --compare")
    if args.tf_env:
        return prepare_tf(args)
    if args.register:
        from ..report.register import register_markdown, register_rows

        print(json.dumps(register_rows(), indent=1, ensure_ascii=False) if args.json
              else register_markdown())
        return 0
    if args.compare:
        from ..report.compare import compare_reports, format_compare, load_report
        from ..report.html import write_compare_html

        a_path, b_path = args.compare
        comparison = compare_reports(load_report(a_path), load_report(b_path), a_path, b_path)
        out = Path(args.out or "report-compare")
        out.mkdir(parents=True, exist_ok=True)
        (out / "compare.json").write_text(json.dumps(comparison, indent=1, default=str) + "\n")
        html = write_compare_html(comparison, out / "compare.html")
        print(json.dumps(comparison, indent=1, default=str) if args.json
              else format_compare(comparison))
        print(f"comparison: {html}, {out / 'compare.json'}", file=sys.stderr)
        return 0
    from ..report.html import write_report_html
    from ..report.run import run_report

    out = Path(args.out or "report")
    report = run_report(args.mode or "quick", out, device=args.device, budget_s=args.budget_s,
                        price_per_gpu_hour_usd=args.price_per_gpu_hour,
                        torch_threads=args.threads, on_progress=show_progress,
                        on_record=show_record)
    html = write_report_html(report, out / "report.html")
    print(json.dumps(report, indent=1, default=str) if args.json
          else format_verdicts(report, colour=sys.stdout.isatty()))
    print(f"report: {html} (open it in a browser; no network needed), {out / 'report.json'}, "
          f"points in {out / report['results_file']}", file=sys.stderr)
    if report["stopped"] == "interrupted":
        return 130
    return 0 if report["complete"] else 3


def prepare_tf(args) -> int:
    """`report --tf-env`: TensorFlow into a venv of its own (never the lab's environment)."""
    import subprocess

    from ..core.backends import HAS_CUDA
    from ..workloads.tf_env import prepare_tf_env, tf_python

    try:
        root = prepare_tf_env(gpu=HAS_CUDA)
    except (OSError, subprocess.CalledProcessError) as exc:
        args.command_parser.exit(1, f"a800lab: error: preparing TensorFlow's venv failed: {exc}; "
                                    "pip's message is above\n")
    print(f"TensorFlow's venv: {root} ({tf_python()}); the report runs the guide's "
          "TensorFlow snippets in it")
    return 0


def format_verdicts(report: dict, colour: bool = False) -> str:
    """The verdicts as terminal lines under a header (device, completeness): per claim its status
    (coloured when `colour`), words, deciding reading, measurement, other readings and why."""
    p = report["points"]
    lines = [f"{report['device_name']} ({report['scope']}), {report['mode']} battery: "
             f"{p['measured']} of {p['planned']} points measured ({p['failed']} failed) in "
             f"{report['wall_s']:.0f} s" + (f"; stopped: {report['stopped']}"
                                            if report["stopped"] else "")]
    if report["scope"] != "GPU":
        lines += _wrap("on a CPU no verdict is a GPU result: a claim about GPU hardware reads "
                       "\"method shown on CPU; says nothing about the GPU\", with its numbers",
                       "  ")
    counts = {s: sum(c["status"] == s for c in report["claims"]) for s in STATUSES}
    lines.append("  " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    for claim in report["claims"]:
        status = claim["status"]
        label = f"[{status}]"
        if colour and status in LOOKS:
            label = f"\033[{LOOKS[status].ansi}m{label}\033[0m"
        where = ", ".join(claim.get("cites") or []) or claim.get("where", "")
        lines.append(f"  {label} {claim['id']} ({where}): "
                     f"{claim.get('stated') or claim.get('text')}")
        literal = next((r for r in claim.get("readings") or [] if r.get("decides")), None)
        beside = [f"{r['name']}: {r['status']} ({r['text']})"
                  for r in claim.get("other_readings") or []]
        for name, text in (("reading", literal and f"{literal['name']}: {literal['text']}"),
                           ("measured", claim["measured"]), ("beside", "; ".join(beside)),
                           ("why", claim["reason"])):
            if text:
                lines += _wrap(f"{name}: {text}", "      ")
    for flag in report["health"]["flags"]:
        lines.append(f"  [FLAG] {flag['message']}")
    if not report["complete"]:
        lines.append("not complete: run the same command again to measure the rest")
    return "\n".join(lines)


def _wrap(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent + "  ")
