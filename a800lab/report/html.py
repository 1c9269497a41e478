"""The HTML pages of `a800lab report`, one report or two side by side: one self-contained file
each (inline CSS, figures as inline PNG), so it opens anywhere, also on an air-gapped box.

    write_report_html(report, "report/report.html")       # report: report.json's dict
    write_compare_html(compare_reports(a, b, "a/", "b/"), "compare.html")
"""

import base64
import html
from pathlib import Path
from typing import Any

from ..core.doctor import format_report, with_defaults
from ..core.envdiff import show_value
from .claims import LOOKS, NOT_MEASURABLE, STATUSES
from .compare import describe_side, format_number, format_ratio
from .figures import figure_png, report_figures, who

__all__ = ["render_report_html", "render_compare_html", "write_report_html",
           "write_compare_html", "report_figures"]

STOPPED = {"budget": "the time budget ran out", "cancelled": "the run was cancelled",
           "interrupted": "the run was interrupted (Ctrl-C)"}
ROOFLINE_READING = ("Right of a ridge a matmul is compute-bound; the configs of one shape "
                    "share one intensity, so their spread is vertical: how far each falls "
                    "below the roof.")
ROOFLINE_NO_DATASHEET = ("Each tile config (and cuBLAS) at its arithmetic intensity under only "
                         "the matmul rate and copy bandwidth this report measured (dashed; the "
                         "lab's table has no datasheet row for this device). " + ROOFLINE_READING)
CAPTIONS = {
    "peaks": "Measured size³ matmul rate per precision and card; the black tick is the "
             "datasheet's dense peak, the percentage the share of it reached.",
    "tiles": "The tile configs of one matmul, best first, the guide's 16x16 and 32x16 tiles "
             "among them (\"guide\"); the best one is what tc_peak takes as % of peak.",
    "roofline": "Each tile config (and cuBLAS) at its arithmetic intensity (FLOP per byte of "
                "its operands and result) under the roofs of its precision: the datasheet's "
                "(solid) and the matmul rate and copy bandwidth this report measured "
                f"(dashed). {ROOFLINE_READING}",
    "train": "Training samples/s (left) and the step's peak memory (right) per precision.",
    "busbw": "All-reduce bus bandwidth over message size; the dashed line is the link's "
             "datasheet bandwidth.",
}
CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:72em;
 padding:0 1em;color:#1f2328;line-height:1.4}h1{font-size:1.6em;margin-bottom:.2em}
h2{border-bottom:1px solid #d0d7de;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.6em 0;font-size:.92em}th{background:#f6f8fa}
th,td{border:1px solid #d0d7de;padding:.3em .55em;text-align:left;vertical-align:top;
 overflow-wrap:break-word}td.num{text-align:right;font-variant-numeric:tabular-nums}
.status{font-weight:600;display:inline-block;border-radius:4px;padding:.1em .4em;
 white-space:nowrap}
.claim{border:1px solid #d0d7de;border-left:6px solid #8c959f;border-radius:6px;
 padding:.5em .9em;margin:.7em 0;overflow-wrap:break-word}
.claim header{display:flex;flex-wrap:wrap;gap:.3em .6em;align-items:baseline}
.claim .where{color:#57606a;font-size:.9em}.claim p{margin:.35em 0}
.claim blockquote{margin:.4em 0;padding-left:.7em;border-left:3px solid #d0d7de;color:#1f2328}
.claim details{margin:.3em 0}.claim summary{cursor:pointer;color:#0969da;font-size:.9em}
.claim ul{margin:.3em 0;padding-left:1.2em}.index{line-height:2}
.claim .sources{font-size:.85em;color:#57606a;overflow-wrap:anywhere}
.chip{display:inline-block;border-radius:10px;padding:0 .5em;font-size:.8em;
 text-decoration:none;white-space:nowrap;color:#1f2328}
.holds{background:#dafbe1;color:#116329}.fails{background:#ffebe9;color:#a40e26}
.inconclusive{background:#fff1e5;color:#953800;border:1px dashed #bc4c00}
.doc-agrees,.doc-partly,.doc-contradicted{background:#fff;border:1px solid #8c959f}
.doc-agrees{color:#116329}.doc-partly{color:#7d4e00}.doc-contradicted{color:#a40e26}
.method-cpu{background:#ddf4ff;color:#0550ae;border:1px dashed #54aeff}
.failed{background:#fbefff;color:#6e40c9}.untestable{background:#eaeef2;color:#57606a}
.not-measurable{background:#f6f8fa;color:#6e7781}.not-measured{background:#fff8c5;color:#7d4e00}
.reading{color:#57606a;font-size:.9em}.noisy{color:#9a6700;font-size:.85em;font-weight:600}
.warn{background:#fff8c5;border-left:4px solid #d4a72c;padding:.4em .7em}.meta{color:#57606a}
.cpu{background:#ddf4ff;border-left:4px solid #54aeff;padding:.4em .7em}
.small{font-size:.85em;color:#57606a}tr.flagged td,tr.changed td{background:#fff1e5}
figure{margin:1em 0}figure img{max-width:100%;height:auto;border:1px solid #d0d7de}
figcaption{color:#57606a;font-size:.9em}code{font-size:.9em}
pre{white-space:pre-wrap;overflow-x:auto;max-width:100%}
"""


CSS += "".join(f".claim.v-{look.css}{{border-left-color:{look.colour}}}"
               for look in LOOKS.values())


def esc(value: Any) -> str:
    """A value as escaped HTML text, as compare.format_number writes it ("—" where missing)."""
    return html.escape(format_number(value))


def _pct(value: Any) -> str:
    return esc(None) if not isinstance(value, int | float) else f"{100 * value:.0f}%"


def _table(headers: list[str], rows: list[list[str]], row_classes: list[str] | None = None,
           numeric: set[int] = frozenset()) -> str:
    """A table; cells are HTML already escaped."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for row, cls in zip(rows, row_classes or [""] * len(rows), strict=True):
        cells = "".join(f'<td class="num">{c}</td>' if j in numeric else f"<td>{c}</td>"
                        for j, c in enumerate(row))
        body.append(f'<tr class="{cls}">{cells}</tr>' if cls else f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _css(status: Any) -> str:
    return LOOKS[status].css if status in LOOKS else "untestable"


def _status(status: Any, noisy: Any = False) -> str:
    return (f'<span class="status {_css(status)}">{esc(status)}</span>' if status
            else esc(None)) + (' <span class="noisy">noisy</span>' if noisy else "")


def _list(items: list, empty: str) -> str:
    listed = "".join(f"<li>{esc(i)}</li>" for i in items)
    return f"<ul>{listed}</ul>" if items else f"<p>{esc(empty)}</p>"


def _page(title: str, body: list[str]) -> str:
    return ('<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")


# ---- one report --------------------------------------------------------------------------------
def completeness(report: dict) -> str:
    """"38 of 40 points measured; run the same command again to resume (stopped: ...)"."""
    pts = report.get("points") or {}
    counts = f"{esc(pts.get('measured'))} of {esc(pts.get('planned'))} points measured"
    if report.get("complete"):
        return (f"Complete: {counts} ({esc(pts.get('ok'))} ok, {esc(pts.get('failed'))} "
                "failed).")
    stopped = report.get("stopped") or ""
    why = f" (stopped: {esc(STOPPED.get(stopped, stopped))})" if stopped else ""
    return f"{counts}; run the same command again to resume{why}."


def _header(report: dict) -> list[str]:
    scope, wall = report.get("scope"), report.get("wall_s")
    meta = (f"{esc(report.get('mode'))} mode · created {esc(report.get('created'))} · wall time "
            f"{esc(None) if not isinstance(wall, int | float) else f'{wall:.0f} s'} · device "
            f"{esc(report.get('device'))}")
    out = [f"<h1>a800lab report: {esc(report.get('device_name'))} ({esc(scope)})</h1>",
           f'<p class="meta">{meta}</p>',
           f'<p class="{"meta" if report.get("complete") else "warn"}">'
           f"{completeness(report)}</p>"]
    if scope != "GPU":
        out.append('<p class="cpu">CPU fallback: these numbers check the lab\'s methods on this '
                   "CPU at small sizes; they are never GPU results. Claims that need a GPU say "
                   "so.</p>")
    return out


def _claims(report: dict) -> list[str]:
    """One card per claim, measured first, then the documentation's, then the unmeasurable;
    an index of every claim's verdict above them."""
    claims = report.get("claims") or []
    counts = {s: sum(c.get("status") == s for c in claims) for s in STATUSES}
    summary = " · ".join(f"{_status(s)} {n}" for s, n in counts.items() if n)
    scopes = {c.get("scope") for c in claims if c.get("scope")}
    one_scope = len(scopes) == 1   # said once above the cards, not on every card
    out = ["<h2>Claims</h2>", f"<p>{summary or 'no claims in this report'}</p>"]
    if one_scope:
        out.append(f"<p>Measured {esc(next(iter(scopes)))}.</p>")
    if claims:
        out.append('<p class="index">' + " ".join(
            f'<a href="#claim-{esc(c.get("id"))}" class="chip {_css(c.get("status"))}">'
            f'{esc(c.get("id"))}</a>' for c in claims) + "</p>")
    groups = (("Measured or measurable here", lambda c: c.get("kind", "measured") == "measured"
               and c.get("status") != NOT_MEASURABLE),   # a report before kinds: by status
              ("Decided by documentation", lambda c: c.get("kind") == "documentation"),
              ("Not measurable", lambda c: c.get("status") == NOT_MEASURABLE))
    for title, belongs in groups:
        cards = [_card(c, one_scope) for c in claims if belongs(c)]
        if cards:
            out += [f"<h3>{title}</h3>", *cards]
    return out


def _readings(c: dict) -> str:
    """The deciding reading, then the others, each with its outcome where one was measured,
    then the rule."""
    outcomes = {r["name"]: r for r in c.get("other_readings") or []}
    parts = []
    for r in c.get("readings") or []:
        got = outcomes.get(r["name"])
        outcome = (f" → {_status(got['status'])} {esc(got['text'])}" if got else
                   f" (not measured: {esc(r['unmeasured'])})" if r.get("unmeasured") else "")
        parts.append(f"<li><b>{esc(r['name'])}</b> (decides): {esc(r['text'])}</li>"
                     if r.get("decides") else
                     f'<li class="reading">{esc(r["name"])}: {esc(r["text"])}{outcome}</li>')
    if c.get("decides") and c.get("kind", "measured") == "measured":
        parts.append(f'<li class="reading">decided: {esc(c["decides"])}</li>')
    return f"<ul>{''.join(parts)}</ul>" if parts else ""


def _card(c: dict, one_scope: bool) -> str:
    """A claim as a card: verdict, id, where and chapter on one line; the guide's words; what
    was measured and why; the readings and the rule folded below."""
    status, cid = c.get("status"), esc(c.get("id"))
    head = (f"<header>{_status(status, c.get('noisy'))} <code>{cid}</code> "
            f'<span class="where">{esc(c.get("where"))} · chapter {esc(c.get("chapter"))} '
            f"{esc(c.get('chapter_title'))}</span></header>")
    body = [f'<blockquote class="stated">{esc(c.get("stated") or c.get("text"))}</blockquote>']
    why, sources = c.get("reason") or "", c.get("documents") or ""
    if sources and why.endswith(f" ({sources})"):   # the documents named apart, addresses whole
        why = why[:-len(sources) - 3]
    else:
        sources = ""
    for cls, label, text in (("scope", "Where", None if one_scope else c.get("scope")),
                             ("measured", "Measured", c.get("measured")),
                             ("why", "Why", why), ("sources", "Documents", sources)):
        if text:
            body.append(f'<p class="{cls}"><b>{label}:</b> {esc(text)}</p>')
    readings = _readings(c)
    if readings:
        body.append(f"<details><summary>readings and the rule</summary>{readings}</details>")
    body.append(f'<p class="small">chapter <code>{esc(c.get("chapter_path"))}</code></p>')
    return (f'<article class="claim v-{_css(status)}" id="claim-{cid}">{head}'
            f'{"".join(body)}</article>')


def _health(report: dict) -> list[str]:
    health = report.get("health") or {}
    advice = health.get("advice") or (report.get("doctor") or {}).get("advice") or []
    out = ["<h2>Health</h2>", "<h3>Advice</h3>", _list(advice, "nothing to fix found."),
           "<h3>Cards</h3>"]
    cards, flags = health.get("cards") or [], health.get("flags") or []
    flagged = {f.get("device") for f in flags}
    rows = [[esc(c.get("device")), esc(c.get("name")), esc(c.get("precision")),
             esc(c.get("matmul_tflops")), esc(c.get("datasheet_tflops")),
             _pct(c.get("ratio_of_datasheet")), esc(c.get("copy_gbs")),
             esc(c.get("datasheet_copy_gbs")), "noisy" if c.get("noisy") else ""] for c in cards]
    out.append(_table(["device", "name", "precision", "matmul TFLOP/s", "datasheet TFLOP/s",
                       "of datasheet", "copy GB/s", "datasheet copy GB/s", "noise"], rows,
                      ["flagged" if c.get("device") in flagged else "" for c in cards],
                      {3, 4, 5, 6, 7}) if cards else "<p>no card was measured.</p>")
    threshold = health.get("threshold")
    out += ["<h3>Sibling check</h3>", _list([f.get("message") for f in flags], "") if flags
            else f"<p>no card is more than {_pct(threshold)} below its siblings' median.</p>"
            if len(cards) >= 2 else "<p>one card: no siblings to compare it with.</p>"]
    if isinstance(threshold, int | float):
        out.append(f'<p class="small">A card is flagged when it is more than {_pct(threshold)} '
                   f"below its siblings' median, or more than "
                   f"{_pct(health.get('datasheet_threshold'))} below its datasheet figure.</p>")
    out += _memory_health(health.get("memory") or {})
    if report.get("doctor"):
        out.append("<details><summary>doctor's full report: GPUs, clocks and throttling, ECC, "
                   "MIG, topology (<code>nvidia-smi topo -m</code>), NUMA affinity</summary>"
                   f"<pre>{esc(format_report(with_defaults(report['doctor'])))}</pre></details>")
    busbw = health.get("busbw") or {}
    out.append("<h3>Bus bandwidth</h3>")
    if not busbw.get("rows"):
        return out + [f"<p>{esc(busbw.get('untestable') or 'not measured.')}</p>"]
    return out + [_table(["message size (bytes)", "busbw GB/s", "algbw GB/s", "time ms"],
                         [[esc(r.get(k)) for k in ("size_bytes", "busbw_gbs", "algbw_gbs",
                                                   "time_ms")] for r in busbw["rows"]],
                         numeric={0, 1, 2, 3}),
                  f'<p class="small">link bandwidth (datasheet): {esc(busbw.get("link_gbs"))}'
                  " GB/s</p>"]


def _memory_health(memory: dict) -> list[str]:
    """ECC counters, remapped rows and retired pages per GPU: ok / watch / drain, and why."""
    out = ["<h3>Memory health (ECC, remapped rows, retired pages)</h3>"]
    if not memory:
        return out + ["<p>not recorded in this report.</p>"]
    if not memory.get("gpu_found"):
        return out + [f"<p>{esc(memory.get('no_gpu_reason') or 'no GPU found')}: nothing to "
                      "check.</p>"]
    gpus = memory.get("gpus", [])
    rows = [[esc(g.get("index")), esc(g.get("name")), esc(g.get("verdict")),
             esc("; ".join(g.get("reasons") or []) or None)] for g in gpus]
    return out + [_table(["GPU", "name", "verdict", "why"], rows,
                         ["flagged" if g.get("verdict") != "ok" else "" for g in gpus])]


def _caption(key: str, report: dict) -> str:
    """The figure's caption; the peaks' datasheet tick is only described where it is drawn."""
    if key == "peaks" and not any(r.get("datasheet_tflops")
                                  for r in report["series"].get("peaks", [])):
        return ("Measured size³ matmul rate per precision and card (the lab's table has no "
                "datasheet figure for this device).")
    if key == "roofline" and not (report["series"].get("roofs") or {}).get("datasheet_tflops"):
        return ROOFLINE_NO_DATASHEET
    return CAPTIONS[key]


def _figures(report: dict) -> list[str]:
    out = ["<h2>Figures</h2>"]
    figures = report_figures(report)
    if not figures:
        return out + ["<p>no series measured yet.</p>"]
    for key, fig in figures.items():
        png = base64.b64encode(figure_png(fig)).decode("ascii")
        alt = esc(f"{key}: {who(report)}")
        out.append(f'<figure><img src="data:image/png;base64,{png}" alt="{alt}">'
                   f"<figcaption>{esc(_caption(key, report))}</figcaption></figure>")
        failed = [t for t in report["series"]["tiles"] if t.get("outcome", "ok") != "ok"
                  or t.get("tflops") is None] if key == "tiles" else []
        if failed:
            out.append("<p>Failed tile configs:</p>" + "<ul>" + "".join(
                f"<li><code>{esc(t.get('config'))}</code>: {esc(t.get('outcome'))}"
                f"{' — ' + esc(t['message']) if t.get('message') else ''}</li>"
                for t in failed) + "</ul>")
    return out


ENV_KEYS = (("python", "Python"), ("torch", "torch"), ("cuda", "CUDA (torch)"),
            ("cudnn", "cuDNN"), ("nccl", "NCCL"), ("driver", "NVIDIA driver"),
            ("hostname", "host"), ("host", "host"), ("platform", "OS / kernel"),
            ("cpu_model", "host CPU"), ("device", "device"), ("device_name", "device name"),
            ("mode", "mode"), ("fingerprint", "fingerprint"))


def render_report_html(report: dict) -> str:
    """A report (report.json's dict) as one self-contained HTML document."""
    title = f"a800lab report: {report.get('device_name') or 'unknown device'} " \
            f"({report.get('scope') or '—'})"
    values = [[esc(k), esc(v)] for k, v in (report.get("thresholds") or {}).items()
              if k != "rules"]
    env = report.get("environment") or {}
    facts = [[esc(label), esc(env.get(key))] for key, label in ENV_KEYS if key in env] + [
        [esc("results file"), f"<code>{esc(report.get('results_file'))}</code>"],
        [esc("price per GPU-hour (USD)"), esc(report.get("price_per_gpu_hour_usd"))]]
    return _page(title, [
        *_header(report), *_claims(report), *_health(report), *_figures(report),
        "<h2>Thresholds</h2>",
        "<p>Each claim's rule is in its row (\"decided\"). Shared by the rules:</p>",
        _table(["threshold", "value"], values) if values else "<p>no thresholds recorded.</p>",
        "<h2>Environment</h2>", _table(["fact", "value"], facts)])


# ---- two reports -------------------------------------------------------------------------------
def render_compare_html(c: dict) -> str:
    """compare_reports' dict as one self-contained HTML document."""
    a, b = c["a"], c["b"]
    body = [f"<h1>a800lab reports compared: {esc(a.get('device_name'))} ({esc(a.get('scope'))})"
            f" vs {esc(b.get('device_name'))} ({esc(b.get('scope'))})</h1>",
            f'<p class="meta">A: {esc(describe_side(a))}<br>B: {esc(describe_side(b))}</p>']
    if c.get("notes"):
        body += ["<h2>Notes</h2>", _list(c["notes"], "")]
    d = c.get("env_diff")
    body.append("<h2>Environment differences</h2>")
    if d is None:
        body.append("<p>not compared: a report holds no doctor report.</p>")
    else:
        diffs = [(x, "") for x in d["differences"]] + \
                [(x, "only in A") for x in d["only_a"]] + [(x, "only in B") for x in d["only_b"]]
        rows = [[esc(x["label"] + (f" ({side})" if side else "")),
                 esc(show_value(x["field"], x["a"])), esc(show_value(x["field"], x["b"])),
                 esc(x["meaning"])] for x, side in diffs]
        body.append(_table(["field", "A", "B", "meaning"], rows) if rows else
                    "<p>none in the fields both doctor reports record.</p>")
    rows = [[esc(f["label"]), esc(f["a"]), esc(f["b"]), esc(f.get("unit") or None),
             esc(format_ratio(f))] for f in c["figures"]]
    body += ["<h2>Figures (B / A)</h2>",
             _table(["figure", "A", "B", "unit", "B / A"], rows, numeric={1, 2, 4})
             if rows else "<p>neither report has figures.</p>"]
    rows = [[esc(cl["id"]), esc(cl.get("text")), _side(cl, "a"), _side(cl, "b"),
             esc(cl.get("note"))] for cl in c["claims"]]
    body += ["<h2>Claims</h2>", _table(["claim", "text", "A", "B", ""], rows,
                                       ["changed" if cl["changed"] else "" for cl in c["claims"]])
             if rows else "<p>neither report has claims.</p>"]
    return _page(f"a800lab reports compared: {a.get('path')} vs {b.get('path')}", body)


def _side(cl: dict, side: str) -> str:
    """One side's verdict in the comparison, its scope named where the two differ."""
    scope = cl.get(f"{side}_scope") if not cl.get("same_scope", True) else None
    return _status(cl[f"{side}_status"], cl.get(f"{side}_noisy")) + (
        f'<br><span class="reading">{esc(scope)}</span>' if scope else "")


def write_report_html(report: dict, path: str | Path) -> Path:
    """render_report_html into `path` (UTF-8); returns the path."""
    return _write(render_report_html(report), path)


def write_compare_html(c: dict, path: str | Path) -> Path:
    """render_compare_html into `path` (UTF-8); returns the path."""
    return _write(render_compare_html(c), path)


def _write(text: str, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    return p
