"""The device panel's figure (chapter 01): NVML telemetry over time, throttle reasons shaded.

    fig = telemetry_figure(sampler.samples, device="cuda:0")   # utilisation, memory, power, clock
"""

from collections.abc import Mapping, Sequence

from matplotlib.figure import Figure

from ..core.units import GIB
from .look import LabFigure, place_legend
from .parts import new_axes, say

# telemetry key, axis label, divisor
_TELEMETRY_PANELS = (
    ("gpu_util_pct", "GPU util (%)", 1.0),
    ("mem_used_bytes", "memory used (GiB)", GIB),
    ("power_w", "power (W)", 1.0),
    ("sm_clock_mhz", "SM clock (MHz)", 1.0),
)


def _throttle_spans(samples: list[Mapping]) -> list[tuple[float, float, set]]:
    """(start_s, end_s, reasons) for each run of samples with a throttle reason ("idle" aside)."""
    spans: list[tuple[float, float, set]] = []
    throttled = False  # the previous sample was
    for i, s in enumerate(samples):
        reasons = {r for r in s.get("throttle_reasons") or () if "idle" not in str(r).lower()}
        end = samples[i + 1]["t_s"] if i + 1 < len(samples) else s["t_s"]
        if reasons and throttled:
            spans[-1] = (spans[-1][0], end, spans[-1][2] | reasons)
        elif reasons:
            spans.append((s["t_s"], end, reasons))
        throttled = bool(reasons)
    return spans


def telemetry_figure(samples: Sequence[Mapping], *, device: str | None = None) -> Figure:
    """Util %, memory GiB, power W and SM clock MHz over time, throttled periods shaded red;
    ``device`` (else a sample's device_name) names the GPU in the title."""
    samples = sorted((s for s in samples if s.get("t_s") is not None), key=lambda s: s["t_s"])
    named = device or next((str(s["device_name"]) for s in samples if s.get("device_name")),
                           "GPU not named")
    subtitle = f"{named} (GPU, NVML telemetry)"
    if not samples:
        fig, ax, _ = new_axes(None, figsize=(6.4, 4.4))
        ax.set_axis_off()
        say(ax, "no telemetry samples", "large")
        fig.suptitle(subtitle, fontsize="medium")
        return fig
    t0 = samples[0]["t_s"]  # one-off snapshots carry time.time(); plot from zero either way
    samples = [{**s, "t_s": s["t_s"] - t0} for s in samples]
    fig = LabFigure(figsize=(7, 7.5), layout="constrained")
    axes = fig.subplots(len(_TELEMETRY_PANELS), 1, sharex=True)
    spans = _throttle_spans(samples)
    for n, (ax, (key, label, scale)) in enumerate(zip(axes, _TELEMETRY_PANELS, strict=True)):
        points = [(s["t_s"], s[key] / scale) for s in samples if s.get(key) is not None]
        if points:
            ax.plot(*zip(*points, strict=True), marker=".", markersize=3)
        else:
            say(ax, "n/a", "large")
        ax.set_ylabel(label)
        for start, end, reasons in spans:
            ax.axvspan(start, end, color="tab:red", alpha=0.15, linewidth=0,
                       label=f"throttled: {', '.join(sorted(reasons))}" if n == 0 else None)
    axes[0].set_title("telemetry")
    fig.suptitle(subtitle, fontsize="medium")
    axes[-1].set_xlabel("time (s)")
    place_legend(axes[0], list(zip(*axes[0].get_legend_handles_labels(), strict=True)))
    return fig
