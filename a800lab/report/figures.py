"""Figures of an `a800lab report` (report.json's "series"): peak rates against the datasheet,
the tile configs ranked and under the roofline, training per precision, all-reduce bus
bandwidth. Pure matplotlib; every title names the device and mode; noisy bars hatched."""

import io
import math
import textwrap

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from ..core.units import format_size
from ..figures.look import NOISY_MARKER, PALETTE, LabFigure, note_handle, place_legend
from ..figures.tiles import draw_roofs, roofs_of

NOISY_HATCH = "///"
LOG_SPAN = 50.0        # bars spanning more than this factor go on a log axis (fp32 vs fp8)
_FAILED_SHOWN = 4      # failed tile configs named under the chart (the HTML lists them all)


def who(report: dict) -> str:
    """The device and mode every title names: "NVIDIA H200 · GPU · quick"."""
    parts = [report.get("device_name") or "device not recorded",
             report.get("scope") or "mode not recorded", report.get("mode")]
    return " · ".join(str(p) for p in parts if p)


def _num(value) -> float:   # NaN where missing or not a number
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)


def _bar(ax: Axes, x, height: float, width: float, color: str, noisy: bool,
         horizontal: bool = False) -> None:
    """One bar: filled, or hollow and hatched when its measurement was noisy."""
    look = dict(facecolor="white", edgecolor=color, hatch=NOISY_HATCH) if noisy else {
        "color": color}
    if horizontal:
        ax.barh(x, height, width, **look)
    else:
        ax.bar(x, height, width, **look, **({"linewidth": 1.2} if noisy else {}))


def _axis(ax: Axes, names: list[str], values: list[float], label: str) -> None:
    """Category ticks under grouped bars, and a log axis when they span more than LOG_SPAN."""
    ax.set_xticks(range(len(names)), names)
    ax.set_xlim(-0.5, len(names) - 0.5)
    positive = [v for v in values if v > 0 and math.isfinite(v)]
    if positive and max(positive) / min(positive) > LOG_SPAN:
        ax.set_yscale("log")
        label += " (log scale)"
    ax.set_ylabel(label)


NOISY_ENTRY = (Patch(facecolor="white", edgecolor="black", hatch=NOISY_HATCH),
               "noisy measurement (hatched, hollow)")


def peaks_figure(report: dict) -> Figure:
    """Measured size^3 matmul TFLOP/s per precision, one bar per card, the datasheet's dense
    peak as a black tick over each bar and the share of it written above."""
    rows = report["series"]["peaks"]
    precisions = list(dict.fromkeys(r["precision"] for r in rows))
    devices = list(dict.fromkeys(r["device"] for r in rows))
    names = {r["device"]: r.get("card_name") or r["device"] for r in rows}
    width = min(0.8 / len(devices), 0.5)
    fig = LabFigure(figsize=(10.0, 4.2), layout="constrained")
    ax = fig.subplots()
    entries, values, any_noisy, any_missing, any_sheet = [], [], False, False, False
    for i, device in enumerate(devices):
        color = PALETTE[i % len(PALETTE)]
        entries.append((Patch(color=color), f"{device} ({names[device]})"))
        for j, precision in enumerate(precisions):
            x = j - 0.4 + width * (i + 0.5)
            row = next((r for r in rows if r["device"] == device
                        and r["precision"] == precision), None)
            tflops = _num(row and row.get("tflops"))
            sheet = _num(row and row.get("datasheet_tflops"))
            if math.isfinite(sheet):
                any_sheet = True
                values.append(sheet)
                ax.hlines(sheet, x - width / 2, x + width / 2, colors="black", linewidth=2)
            if not math.isfinite(tflops):
                any_missing = True
                ax.text(x, 0, "n/a", ha="center", va="bottom", fontsize="x-small",
                        color="dimgray", transform=ax.get_xaxis_transform())
                continue
            values.append(tflops)
            any_noisy |= bool(row.get("noisy"))
            _bar(ax, x, tflops, width * 0.9, color, bool(row.get("noisy")))
            if math.isfinite(sheet) and sheet > 0:
                ax.annotate(f"{tflops / sheet:.0%}", (x, tflops), ha="center", va="bottom",
                            fontsize="x-small", xytext=(0, 2), textcoords="offset points")
    _axis(ax, precisions, values, "TFLOP/s")
    ax.set_title(f"peak matmul rate per precision vs datasheet\n{who(report)}")
    entries.append((Line2D([], [], color="black", linewidth=2),
                    "datasheet dense peak (% above a bar: share of it)") if any_sheet else
                   note_handle("no datasheet figure for this device"))
    place_legend(ax, entries + [NOISY_ENTRY] * any_noisy
                 + [note_handle("n/a: failed or not measured")] * any_missing)
    return fig


def tiles_figure(report: dict) -> Figure:
    """The tile configs of one matmul by TFLOP/s, best at the top, failed ones named below."""
    rows = report["series"]["tiles"]
    ok = sorted((r for r in rows if r.get("outcome", "ok") == "ok"
                 and math.isfinite(_num(r.get("tflops")))), key=lambda r: -_num(r["tflops"]))
    failed = [r for r in rows if all(r is not o for o in ok)]
    fig = LabFigure(figsize=(10.0, 1.8 + 0.32 * max(len(ok), 3)), layout="constrained")
    ax = fig.subplots()
    for y, r in enumerate(ok):
        _bar(ax, y, r["tflops"], 0.7, "C0", bool(r.get("noisy")), horizontal=True)
        ax.annotate(f"{r['tflops']:.4g}", (r["tflops"], y), va="center", fontsize="x-small",
                    xytext=(3, 0), textcoords="offset points")
    ax.set_yticks(range(len(ok)), [str(r["config"]) for r in ok], fontsize="small")
    ax.margins(x=0.12)   # room for the value written after the longest bar
    ax.set_ylim(len(ok) - 0.5 if ok else 0.5, -0.5)   # best first, at the top
    title = "tile configs by TFLOP/s"
    if len(ok) >= 2 and ok[-1]["tflops"] > 0:
        title += f" (best / worst: {ok[0]['tflops'] / ok[-1]['tflops']:.2f}x)"
    ax.set_title(f"{title}\n{who(report)}")
    if not ok:
        ax.text(0.5, 0.5, "no config ran successfully", transform=ax.transAxes, ha="center",
                va="center", color="dimgray")
    label = "TFLOP/s"
    if failed:
        named = ", ".join(f"{r['config']} ({r.get('outcome') or 'failed'})"
                          for r in failed[:_FAILED_SHOWN])
        more = f", +{len(failed) - _FAILED_SHOWN} more" if len(failed) > _FAILED_SHOWN else ""
        label += "\n" + textwrap.fill(f"failed ({len(failed)}, listed below the chart): "
                                      f"{named}{more}", 110)
    ax.set_xlabel(label)
    place_legend(ax, [(Patch(color="C0"), "config measured ok")]
                 + [NOISY_ENTRY] * any(r.get("noisy") for r in ok))
    return fig


def train_figure(report: dict) -> Figure:
    """Training samples/s (left) and step peak memory (right) per precision, per model."""
    rows = report["series"]["train"]
    models = list(dict.fromkeys(f"{r['model']} {r.get('size') or ''}".strip() for r in rows))
    precisions = list(dict.fromkeys(r["precision"] for r in rows))
    width = min(0.8 / len(precisions), 0.5)
    fig = LabFigure(figsize=(11.0, 4.2), layout="constrained")
    axes = fig.subplots(1, 2)
    panels = (("samples_per_s", "samples/s", "training throughput"),
              ("peak_mib", "peak memory (MiB)", "step peak memory"))
    any_noisy = False
    for ax, (key, label, title) in zip(axes, panels, strict=True):
        values = []
        for i, precision in enumerate(precisions):
            for j, model in enumerate(models):
                row = next((r for r in rows if r["precision"] == precision and
                            f"{r['model']} {r.get('size') or ''}".strip() == model), None)
                value = _num(row and row.get(key))
                if math.isfinite(value):
                    values.append(value)
                    any_noisy |= bool(row.get("noisy"))
                    _bar(ax, j - 0.4 + width * (i + 0.5), value, width * 0.9,
                         PALETTE[i % len(PALETTE)], bool(row.get("noisy")))
        _axis(ax, models, values, label)
        ax.set_title(f"{title} per precision\n{who(report)}", fontsize="medium")
    entries = [(Patch(color=PALETTE[i % len(PALETTE)]), p) for i, p in enumerate(precisions)]
    place_legend(axes[-1], entries + [NOISY_ENTRY] * any_noisy)
    return fig


def busbw_figure(report: dict) -> Figure:
    """All-reduce bus bandwidth over message size (log x), the link's datasheet figure dashed."""
    rows = sorted((r for r in report["series"]["busbw"]
                   if math.isfinite(_num(r.get("size_bytes")))), key=lambda r: r["size_bytes"])
    x = np.array([_num(r["size_bytes"]) for r in rows])
    y = np.array([_num(r.get("busbw_gbs")) for r in rows])
    noisy = np.array([bool(r.get("noisy")) for r in rows], dtype=bool)
    fig = LabFigure(figsize=(10.0, 4.2), layout="constrained")
    ax = fig.subplots()
    ax.plot(x, y, "-o", color="C0", markevery=np.flatnonzero(~noisy).tolist())
    entries = [(Line2D([], [], color="C0", marker="o"), "measured bus bandwidth")]
    if noisy.any():
        ax.plot(x[noisy], y[noisy], "o", color="C0", linestyle="none", **NOISY_MARKER)
        entries.append((Line2D([], [], color="C0", marker="o", linestyle="none",
                               **NOISY_MARKER), "noisy point (hollow)"))
    link = _num(((report.get("health") or {}).get("busbw") or {}).get("link_gbs"))
    if math.isfinite(link):
        ax.axhline(link, color="dimgray", linestyle="--")
        entries.append((Line2D([], [], color="dimgray", linestyle="--"),
                        f"link bandwidth (datasheet): {link:g} GB/s"))
    ax.set_xscale("log", base=2)
    if len(x):
        ticks = np.unique(x)
        ticks = ticks[:: math.ceil(len(ticks) / 8)]   # 8 labels at most
        ax.set_xticks(ticks, [format_size(v) for v in ticks])
    ax.set(xlabel="message size", ylabel="bus bandwidth (GB/s)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"all-reduce bus bandwidth vs message size\n{who(report)}")
    place_legend(ax, entries)
    return fig


KINDS = {"tile": ("C0", "tile config"), "guide": ("C1", "the guide's tile"),
         "cublas": ("C2", "cuBLAS (torch.matmul)")}


def roofline_figure(report: dict) -> Figure:
    """The tile points at their arithmetic intensity under the roofs of their precision: the
    datasheet's (solid) and what the report's peak step measured (dashed)."""
    rows = report["series"]["roofline"]
    r = report["series"].get("roofs") or {}
    fig = LabFigure(figsize=(10.0, 4.6), layout="constrained")
    ax = fig.subplots()
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP/byte)",
           ylabel="achieved TFLOP/s", title=f"roofline, {r.get('precision') or ''} matmul")
    entries = []
    for kind, (color, label) in KINDS.items():
        shown = [row for row in rows if row.get("kind") == kind]
        for row in shown:
            ax.plot(_num(row["intensity_flop_per_byte"]), _num(row["tflops"]), "o",
                    color=color, **(NOISY_MARKER if row.get("noisy") else {}))
        if shown:
            entries.append((Line2D([], [], color=color, marker="o", linestyle="none"), label))
    if any(row.get("noisy") for row in rows):
        entries.append((Line2D([], [], color="black", marker="o", linestyle="none",
                               **NOISY_MARKER), "noisy point (hollow)"))
    measured = f"measured at {r['measured_size']}³" if r.get("measured_size") else "measured"
    measured += " (noisy)" if r.get("measured_noisy") else ""
    roofs = roofs_of(r.get("datasheet_tflops"), r.get("datasheet_gbs"),
                     r.get("measured_tflops"), r.get("measured_gbs"))
    entries += draw_roofs(ax, roofs, [_num(row["intensity_flop_per_byte"]) for row in rows],
                          labels={"measured": measured})
    ax.set_title(f"{ax.get_title()}\n{who(report)}")
    place_legend(ax, entries)
    return fig


BUILDERS = {"peaks": peaks_figure, "tiles": tiles_figure, "roofline": roofline_figure,
            "train": train_figure, "busbw": busbw_figure}


def report_figures(report: dict) -> dict[str, Figure]:
    """One Figure per series the report holds with rows, keyed as BUILDERS."""
    series = report.get("series") or {}
    return {key: build(report) for key, build in BUILDERS.items()
            if isinstance(series.get(key), list) and series[key]}


def figure_png(fig: Figure, dpi: int = 100) -> bytes:
    """A figure as PNG bytes (Agg, no pyplot)."""
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()
