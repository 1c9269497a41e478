"""DevicePanel: the GPUs of this machine, their topology, what to fix, and live telemetry
(`nvml=` and `cuda_properties=` inject fakes). The command-line twin: `python -m a800lab doctor`.

    panel = DevicePanel()            # never raises without a GPU or NVML
    panel.report                     # the doctor dict (a800lab.core.doctor.build_report)
    panel.start_telemetry(0)         # sample GPU 0 on a background thread; stop_telemetry()
    panel.to_html()                  # every table and advice line as one HTML string
"""

import html
import time
from typing import Any

import ipywidgets as widgets

from ..core.device import cpu_info
from ..core.doctor import build_report
from ..core.gpu_map import nvml_index
from ..core.nvml import NotAvailable, device_count
from ..core.telemetry import TelemetrySampler
from ..figures.device import telemetry_figure
from . import device_html as dh
from .panel import Job, Panel, StatusLine, png


def _fallback_report(exc: Exception) -> dict:
    """A report for when discovery itself failed (a bug, not a missing GPU)."""
    try:
        cpu = cpu_info().to_dict()
    except Exception:  # keep the panel up whatever the host looks like
        cpu = {}
    why = f"device discovery failed: {type(exc).__name__}: {exc}"
    return {"system": None, "cpu": cpu, "gpu_found": False, "no_gpu_reason": why, "gpus": [],
            "topology": None, "advice": [f"No NVIDIA GPU found: {why}."]}


class DevicePanel(Panel):
    """A per-GPU table, the `nvidia-smi topo -m` matrix as a coloured grid, NUMA affinity,
    doctor's advice and a telemetry strip with Start / Stop; without an NVIDIA GPU it says why
    and shows the CPU facts instead."""

    def __init__(self, nvml: Any = None, cuda_properties: list | None = None, *,
                 interval_s: float = 0.2, refresh_s: float = 1.0, window_s: float = 120.0,
                 max_duration_s: float = 3600.0):
        if not (interval_s > 0 and refresh_s > 0 and window_s > 0 and max_duration_s > 0):
            raise ValueError("interval_s, refresh_s, window_s and max_duration_s must be positive "
                             "numbers of seconds, e.g. interval_s=0.2, refresh_s=1")
        self._nvml, self._cuda_properties = nvml, cuda_properties
        self.interval_s, self.refresh_s = interval_s, refresh_s
        self.window_s, self.max_duration_s = window_s, max_duration_s
        self._sampler: TelemetrySampler | None = None
        self.telemetry_figure = None
        self.report: dict = {}
        self._build()
        self.refresh()

    def _build(self) -> None:
        self.title = widgets.HTML("<h3>Devices and topology</h3>")
        self.banner, self.system, self.gpu_table, self.topology, self.legend, self.affinity, \
            self.cpu, self.advice, self.telemetry_note, self.latest = \
            (widgets.HTML("") for _ in range(10))
        self.status = StatusLine()
        self.refresh_button = widgets.Button(description="Refresh", icon="refresh",
                                             tooltip="read NVML again (clocks, power, errors)")
        self.refresh_button.on_click(lambda _: self.refresh())
        self.gpu_choice = widgets.Dropdown(options=[], description="GPU",
                                           layout=widgets.Layout(width="160px"))
        self.start_button = widgets.Button(description="Start", button_style="success",
                                           icon="play", tooltip="sample this GPU's telemetry")
        self.stop_button = widgets.Button(description="Stop", button_style="danger", icon="stop",
                                          disabled=True)
        self.start_button.on_click(lambda _: self.start_telemetry())
        self.stop_button.on_click(lambda _: self.stop_telemetry())
        self.job = Job(self.status, stop_button=self.stop_button,
                       buttons=[self.start_button, self.gpu_choice],
                       busy="Telemetry is already running: press Stop first.")
        # hidden until the first telemetry plot (an empty Image shows as a broken picture)
        self.plot = widgets.Image(format="png", layout=widgets.Layout(max_width="720px",
                                                                      display="none"))
        self._gpu_sections = widgets.VBox([
            widgets.HTML("<h4>GPUs</h4>"), self.gpu_table,
            widgets.HTML("<h4>Topology (<code>nvidia-smi topo -m</code>)</h4>"),
            widgets.HBox([self.topology, self.legend],  # side by side when there is room
                         layout=widgets.Layout(flex_flow="row wrap", grid_gap="16px")),
            widgets.HTML("<h4>NUMA and CPU affinity</h4>"), self.affinity])
        self._cpu_sections = widgets.VBox([widgets.HTML("<h4>CPU</h4>"), self.cpu])
        self.widget = widgets.VBox([
            self.title, self.banner, widgets.HBox([self.refresh_button, self.status]),
            self.system, self._gpu_sections, self._cpu_sections,
            widgets.HTML("<h4>Advice</h4>"), self.advice,
            widgets.HTML("<h4>Live telemetry</h4>"),
            widgets.HBox([self.gpu_choice, self.start_button, self.stop_button]),
            self.telemetry_note, self.latest, self.plot,
        ])

    def refresh(self) -> dict:
        """Read NVML and torch again and redraw the tables; returns the new report."""
        try:
            report = build_report(nvml=self._nvml, cuda_properties=self._cuda_properties)
            self.status.say("GPUs found." if report["gpu_found"] else "CPU only: no NVIDIA GPU.",
                            "ok" if report["gpu_found"] else "warn")
        except Exception as exc:  # the panel must come up whatever discovery does
            report = _fallback_report(exc)
            self.status.say(f"Device discovery failed: {type(exc).__name__}: {exc}", "error")
        self.report = report
        gpu_found = bool(report["gpu_found"])
        self.banner.value = "" if gpu_found else dh.no_gpu_html(report)
        self.system.value, self.cpu.value = dh.system_html(report), dh.cpu_html(report)
        self.advice.value = dh.advice_html(report)
        for section, draw in ((self.gpu_table, dh.gpu_table_html),
                              (self.topology, dh.topology_html),
                              (self.legend, lambda _: dh.legend_html()),
                              (self.affinity, dh.affinity_html)):
            section.value = draw(report) if gpu_found else ""
        self._gpu_sections.layout.display = None if gpu_found else "none"
        self._configure_telemetry()
        return report

    def _telemetry_unavailable(self) -> str:  # "" when it can run
        if not self.report.get("gpu_found"):
            return "No NVIDIA GPU found (the reason is in the box above); telemetry reads NVML " \
                   "on an NVIDIA GPU"
        count = device_count(self._nvml)
        if isinstance(count, NotAvailable):
            return f"telemetry reads NVML, which is not usable here: {count.reason}"
        if count == 0:
            return "NVML lists no GPUs"
        return ""

    def _configure_telemetry(self) -> None:
        reason = self._telemetry_unavailable()
        options = [(f"GPU{g['index']}", g["index"]) for g in self.report["gpus"]]
        if [o[1] for o in self.gpu_choice.options] != [o[1] for o in options]:
            self.gpu_choice.options = options
        running = self.telemetry_running
        self.gpu_choice.disabled = self.start_button.disabled = bool(reason) or running
        self.stop_button.disabled = not running
        self.telemetry_note.value = (
            f'<span style="color:#a04000;line-height:1.4">Telemetry unavailable: '
            f'{html.escape(reason)}</span>'
            if reason else
            f"<span style='font-size:12px'>Samples every {self.interval_s:g} s; the plot "
            f"refreshes every {self.refresh_s:g} s and shows the last {self.window_s:g} s; "
            "throttled periods are shaded red.</span>")

    @property
    def telemetry_running(self) -> bool:
        return self.job.running

    def start_telemetry(self, device_index: int | None = None) -> bool:
        """Sample GPU `device_index` (an NVML index; default: the dropdown's); False, the reason
        said, if it cannot start."""
        reason = self._telemetry_unavailable()
        if reason:
            self.status.say(f"Telemetry unavailable: {reason}", "warn")
            return False

        def plan():
            index = self.gpu_choice.value if device_index is None else device_index
            known = [g["index"] for g in self.report["gpus"]]
            if index not in known:
                raise ValueError(f"Cannot sample GPU {index!r}: this machine has GPUs {known}.")
            try:
                sampler = TelemetrySampler(index, interval_s=self.interval_s,
                                           nvml=self._nvml).start()
            except Exception as exc:
                raise RuntimeError(f"Telemetry failed to start: {type(exc).__name__}: "
                                   f"{exc}") from exc
            self._sampler = sampler
            self.gpu_choice.value = index  # the dropdown shows the GPU sampled
            self.status.say(f"Sampling GPU {index} every {self.interval_s:g} s ...")
            return lambda: self._sample(sampler)

        return self.job.start(plan, cannot="", name="a800lab-telemetry-plot",
                              failed=lambda exc: f"Telemetry stop failed: "
                                                 f"{type(exc).__name__}: {exc}")

    def stop_telemetry(self) -> None:
        """Stop sampling and draw the final plot; safe to call twice."""
        self.job.stop()
        self.job.wait()

    def _sample(self, sampler: TelemetrySampler) -> None:
        started, note = time.perf_counter(), ""
        self._render_telemetry()
        while not self.job.sleep(self.refresh_s):
            self._render_telemetry()
            if time.perf_counter() - started > self.max_duration_s:
                note = f"max_duration_s={self.max_duration_s:g} s reached"
                break
        sampler.stop()
        self._render_telemetry()
        summary = sampler.summary()
        notes = [n for n in (note, summary["reason"]) if n]
        problem = f" ({'; '.join(notes)})" if notes else ""
        self.status.say(f"Stopped: {summary['n_samples']} samples of GPU "
                        f"{sampler.device_index} over {summary['duration_s']:.1f} s{problem}.",
                        "warn" if problem else "ok")

    def nvml_index_of(self, cuda_device: int | str = 0) -> int | None:
        """The NVML index (the panel's GPU numbers) of torch's `cuda:<cuda_device>`, or None;
        they differ under CUDA_VISIBLE_DEVICES."""
        index = nvml_index(cuda_device, nvml=self._nvml, cuda_properties=self._cuda_properties)
        return None if isinstance(index, NotAvailable) else index

    @property
    def telemetry_samples(self) -> list[dict]:
        """Every sample of the current or last run (t_s: seconds since Start)."""
        return [] if self._sampler is None else self._sampler.samples

    def telemetry_summary(self) -> dict:
        """The sampler's summary() of the current or last run ({} before the first)."""
        return {} if self._sampler is None else self._sampler.summary()

    def _gpu_title(self, sampler: TelemetrySampler | None) -> str | None:
        """"NVIDIA A800-SXM4-80GB, NVML 3 (cuda:0)": the sampled GPU as the report names it."""
        index = None if sampler is None else sampler.device_index
        gpu = next((g for g in self.report.get("gpus", []) if g["index"] == index), None)
        if gpu is None:
            return None
        torch_name = f", cuda:{gpu['cuda_index']}" if isinstance(gpu.get("cuda_index"), int) else ""
        return f"{gpu['name']}, NVML {index}{torch_name}"

    def _render_telemetry(self) -> None:
        samples = self.telemetry_samples
        samples = [s for s in samples if s["t_s"] >= samples[-1]["t_s"] - self.window_s]
        try:
            figure = telemetry_figure(samples, device=self._gpu_title(self._sampler))
            image = png(figure, dpi=72)
            self.telemetry_figure = figure
            self.plot.value, self.plot.layout.display = image, None
            self.latest.value = dh.latest_telemetry_html(samples[-1]) if samples else ""
        except Exception as exc:  # a bad reading must not kill the refresher or the panel
            self.status.say(f"Telemetry plot failed: {type(exc).__name__}: {exc}", "error")
        reason = self._sampler._reason if self._sampler is not None else ""
        if reason:
            self.status.say(f"Telemetry: {reason}", "error")

    def to_html(self) -> str:
        """Every visible HTML part of the panel."""

        def visible(w: Any):
            if getattr(getattr(w, "layout", None), "display", None) == "none":
                return  # a hidden section (e.g. the GPU tables on a CPU-only machine)
            if isinstance(w, widgets.HTML):
                yield w.value
            for child in getattr(w, "children", ()):
                yield from visible(child)

        return "\n".join(visible(self.widget))
