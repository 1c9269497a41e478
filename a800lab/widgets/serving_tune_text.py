"""The tune view's answer as HTML: the target, the winner and its re-measurement (or why there
is none, and whether anything was re-measured), the noise, the configs dropped for missing
the target, the closed-loop choice's fate under load, and the code to paste.

    panel.tune_text.value = tune_html(outcome)   # a ServeTuneOutcome or an OnlineTuneOutcome
"""

from ..workloads.serving.online import describe_online
from ..workloads.serving.tune import describe_serving
from .training_tools import code_html, rows_table

SHOWN_DROPPED = 4  # configs over the target named; the rest counted


def _dropped(candidates: list[dict]) -> str:
    over = [c for c in candidates if not c["meets_target"]]
    if not over:
        return "none"
    named = "; ".join(f"{describe_serving(c['config'])} (p99 {c['p99_ms']:.3g} ms)"
                      for c in sorted(over, key=lambda c: c["p99_ms"])[:SHOWN_DROPPED])
    more = len(over) - SHOWN_DROPPED
    return named + (f"; +{more} more" if more > 0 else "")


def _offline_rows(outcome) -> list[tuple[str, str]]:
    again = outcome.remeasured
    if outcome.winner is not None:
        winner = describe_serving(outcome.winner)
    elif again:
        winner = (f"none: the best {again['tries']} missed the target when measured again "
                  f"(last: {describe_serving(again['config'])}, p99 {again['p99_ms']:.3g} ms)")
    else:
        winner = "none: no config met the target in the search; nothing was measured again"
    return [("target", f"p99 of a request batch <= {outcome.p99_ms:g} ms (closed loop)"),
            ("winner", winner),
            ("re-measured", f"{again['samples_per_s']:.4g} samples/s, p50 "
                            f"{again['p50_ms']:.3g} ms, p99 {again['p99_ms']:.3g} ms, "
                            f"{again['requests']} requests" if again else "-"),
            ("noise", f"within noise of {len(outcome.search.rivals)} other config(s)"
             if outcome.search.rivals else "clear of the noise"),
            ("over the target", _dropped(outcome.candidates)),
            ("contended", outcome.search.contended or "no")]


def _online_rows(outcome) -> list[tuple[str, str]]:
    again, name = outcome.remeasured, f"p{outcome.percentile:g}"
    if outcome.winner is not None:
        winner = f"{describe_online(outcome.winner)}: goodput {again['rate_rps']:.4g} requests/s"
    elif again:
        winner = (f"none: the best missed when offered its goodput again ({again['tries']} "
                  f"tries, last at {again['rate_rps']:.4g} requests/s: {name} "
                  f"{again['target_ms']:.3g} ms)")
    else:
        winner = "none: no config met the target at any rate tried; nothing offered again"
    rows = [("target", f"{name} of a request, from its arrival, <= {outcome.target_ms:g} ms"),
            ("winner", winner)]
    if again:
        rows.append(("offered again", f"{again['rate_rps']:.4g} requests/s on a fresh server: "
                     f"{name} {again['target_ms']:.3g} ms (95% interval "
                     f"{again['ci_low_ms']:.3g}-{again['ci_high_ms']:.3g}), p50 "
                     f"{again['p50_ms']:.3g} ms, {again['requests']} requests"))
    choice = outcome.closed_choice
    if choice:
        rows.append(("closed-loop choice", f"{describe_serving(choice['config'])}: "
                     f"{choice['samples_per_s']:.4g} samples/s, batch p99 "
                     f"{choice['batch_p99_ms']:.3g} ms; at {choice['rate_rps']:.4g} "
                     f"requests/s: {name} {choice['target_ms']:.3g} ms"
                     + (", saturated" if choice["saturated"] else "")
                     + f" ({choice['verdict']})"))
    rows += [("over the target (closed loop)", _dropped(outcome.closed_loop.candidates)),
             ("contended", outcome.closed_loop.search.contended or "no")]
    return rows


def tune_html(outcome) -> str:
    """The answer table and, when there is a winner, its code."""
    rows = _online_rows(outcome) if hasattr(outcome, "searches") else _offline_rows(outcome)
    return rows_table(rows) + (code_html(outcome.snippet) if outcome.snippet else "")
