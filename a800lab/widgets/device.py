"""DevicePanel: the GPUs of this machine, their topology, what to fix, and live telemetry.

    from a800lab.widgets import DevicePanel
    panel = DevicePanel()            # shows in JupyterLab; never raises without a GPU or NVML
    panel.report                     # the doctor dict (a800lab.core.doctor.build_report)
    panel.start_telemetry(0)         # sample GPU 0 on a background thread, re-plot every ~1 s
    panel.nvml_index_of(0)           # the panel's (NVML) number of torch's cuda:0
    panel.stop_telemetry()           # also the Stop button; panel.telemetry_figure is the plot
    panel.to_html()                  # every table and advice line as one HTML string

Sections: a per-GPU table (name, compute capability, SMs, memory, driver/CUDA, ECC mode and
error counts, MIG, clocks, power, temperature, PCIe, NVLink links, throttle reasons); the
`nvidia-smi topo -m` matrix as a coloured grid with a legend; each GPU's NUMA node and CPUs with
the command that binds a process to them; doctor's advice; and a telemetry strip (utilisation,
memory, power, SM clock) with Start/Stop. Without an NVIDIA GPU the panel says so at the top with
the reason, shows the CPU facts instead and disables telemetry, saying why.

`nvml=` and `cuda_properties=` inject a fake pynvml and torch device properties (tests use
tests/fake_nvml.py). Errors land in the status line; the panel stays usable.
"""

from __future__ import annotations

import html
import io
import threading
import time
from typing import Any

import ipywidgets as widgets
import torch

from ..core.backends import HAS_CUDA
from ..core.device import LINK_LEGEND, cpu_info
from ..core.doctor import build_report
from ..core.nvml import NotAvailable, device_count, is_not_available
from ..core.telemetry import TelemetrySampler
from ..plots import telemetry_figure

GIB = 2**30
# Link class -> (background, text colour): green for NVLink, yellow-orange for PCIe paths of
# growing length, red for crossing the CPU-to-CPU interconnect.
LINK_COLOURS = {
    "X": ("#e0e0e0", "#555555"),
    "PIX": ("#d9ef8b", "#000000"),
    "PXB": ("#fee08b", "#000000"),
    "PHB": ("#fdae61", "#000000"),
    "NODE": ("#f46d43", "#000000"),
    "SYS": ("#d73027", "#ffffff"),
    "n/a": ("#bdbdbd", "#000000"),
}
_LEGEND_NV_EXAMPLES = ("NV1", "NV4", "NV8", "NV12", "NV18")
# nowrap + line-height: JupyterLab's HTML widget would otherwise wrap cells at every space and
# give each line the 28 px height of a widget row.
_CELL = "border:1px solid #ccc;padding:2px 6px;text-align:center;white-space:nowrap"
_TABLE = ('style="border-collapse:collapse;font-size:12px;font-family:monospace;'
          'line-height:1.4"')


def link_colour(link: str) -> tuple[str, str]:
    """(background, text) colours of a topology cell: NV# greener the more links it bonds."""
    if link.startswith("NV") and link[2:].isdigit():
        lightness = max(28, 80 - 3 * int(link[2:]))  # NV1 pale ... NV18 dark green
        return f"hsl(130, 55%, {lightness}%)", "#ffffff" if lightness < 50 else "#000000"
    return LINK_COLOURS.get(link, LINK_COLOURS["n/a"])


def _na(value: Any) -> bool:
    return value is None or is_not_available(value)


def _text(value: Any, scale: float = 1.0, digits: int = 0) -> str:
    """A report value as cell text: "n/a" where not available, numbers scaled and rounded."""
    if _na(value):
        return "n/a"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, int | float):
        return f"{value / scale:.{digits}f}"
    if isinstance(value, list | tuple):
        return ", ".join(map(str, value)) or "-"
    return str(value)


def _why(*values: Any) -> str:
    """The reasons of the not-available values among `values`, for a cell's tooltip."""
    reasons = [v["reason"] if isinstance(v, dict) else v.reason
               for v in values if is_not_available(v)]
    return "; ".join(dict.fromkeys(reasons))


def _td(text: str, *, title: str = "", style: str = "", raw: bool = False) -> str:
    tip = f' title="{html.escape(title)}"' if title else ""
    body = text if raw else html.escape(text)
    return f'<td style="{_CELL};{style}"{tip}>{body}</td>'


def _th(text: str) -> str:
    return f'<th style="{_CELL};background:#f0f0f0">{html.escape(text)}</th>'


def _pair(a: Any, b: Any, scale: float = 1.0, digits: int = 0) -> str:
    return f"{_text(a, scale, digits)}/{_text(b, scale, digits)}"


# ---- HTML sections (pure functions of the doctor report) ------------------------------------
GPU_COLUMNS = ("GPU", "name", "CC", "SMs", "memory free/total GiB", "driver / CUDA", "ECC",
               "ECC errors (unc. / corr.)", "MIG", "SM MHz cur/max", "power W cur/limit",
               "temp C", "PCIe", "NVLinks", "throttle reasons")


def gpu_table_html(report: dict) -> str:
    """One row per GPU of the report; problems coloured, unknowns "n/a" with the reason on hover."""
    system, topo = report["system"], report.get("topology") or {}
    driver = f"{_text(system['driver_version'])} / {_text(system['cuda_driver_version'])}"
    switch_links = topo.get("nvswitch_links") or [0] * len(report["gpus"])
    rows = []
    for g, on_switch in zip(report["gpus"], switch_links, strict=True):
        ecc = {k: (0 if _na(v) else v) for k, v in g["ecc_errors"].items()}
        unc = ecc.get("volatile_uncorrected", 0), ecc.get("aggregate_uncorrected", 0)
        cor = ecc.get("volatile_corrected", 0), ecc.get("aggregate_corrected", 0)
        ecc_text = f"{unc[0]}/{unc[1]} / {cor[0]}/{cor[1]}"
        ecc_style = ("background:#f8d0d0;color:#b00000;font-weight:bold" if any(unc) else
                     "color:#b06000" if any(cor) else "")
        reasons = g["throttle_reasons"]
        throttled = [r for r in (reasons if isinstance(reasons, list | tuple) else [])
                     if r != "gpu_idle"]
        throttle_style = "background:#ffe0b0;color:#a04000;font-weight:bold" if throttled else ""
        throttle_text = (", ".join(throttled) if throttled else
                         "idle" if not _na(reasons) and reasons else _text(reasons))
        temp = g["temperature_c"]
        hot = not _na(temp) and temp >= 85
        pcie = f"gen{_text(g['pcie_gen'])} x{_text(g['pcie_width'])}"
        if (g["pcie_gen"], g["pcie_width"]) != (g["pcie_gen_max"], g["pcie_width_max"]):
            pcie += f" (max gen{_text(g['pcie_gen_max'])} x{_text(g['pcie_width_max'])})"
        links = _text(g["nvlink_active_links"]) + (" to NVSwitch" if on_switch else "")
        cells = [
            _td(str(g["index"])), _td(_text(g["name"]), title=_text(g["uuid"])),
            _td(_text(g["compute_capability"]), title=_why(g["compute_capability"])),
            _td(_text(g["sm_count"]), title=_why(g["sm_count"])),
            _td(_pair(g["memory_free_bytes"], g["memory_total_bytes"], GIB, 1),
                title=_why(g["memory_free_bytes"])),
            _td(driver, title=_why(system["driver_version"])),
            _td(_text(g["ecc_enabled"]), title=_why(g["ecc_enabled"])),
            _td(ecc_text, style=ecc_style, title="uncorrected volatile/aggregate / corrected "
                "volatile/aggregate (volatile = since boot, aggregate = lifetime)"),
            _td(_text(g["mig_enabled"]), title=_why(g["mig_enabled"]),
                style="color:#a04000;font-weight:bold" if g["mig_enabled"] is True else ""),
            _td(_pair(g["sm_clock_mhz"], g["sm_clock_max_mhz"]), title=_why(g["sm_clock_mhz"])),
            _td(_pair(g["power_w"], g["power_limit_w"]), title=_why(g["power_w"])),
            _td(_text(temp), title=_why(temp),
                style="color:#b00000;font-weight:bold" if hot else ""),
            _td(pcie, title=_why(g["pcie_gen"])),
            _td(links, title=_why(g["nvlink_active_links"])),
            _td(throttle_text, style=throttle_style, title=_why(reasons)),
        ]
        rows.append(f'<tr data-gpu="{g["index"]}">{"".join(cells)}</tr>')
    header = "".join(_th(c) for c in GPU_COLUMNS)
    return (f'<div style="overflow-x:auto"><table class="a800lab-gpus" {_TABLE}><thead>'
            f'<tr>{header}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>')


def topology_html(report: dict) -> str:
    """The link matrix as a coloured grid (cells carry data-link="NV4" etc.) plus affinity."""
    topo = report.get("topology")
    if not topo:
        return "<p><i>No topology: no GPUs.</i></p>"
    labels = topo["labels"]
    head = "".join(_th(label) for label in ["", *labels, "CPU Affinity", "NUMA Affinity"])
    rows = []
    for a, row, cpus, node in zip(labels, topo["matrix"], topo["cpu_affinity"],
                                  topo["numa_node"], strict=True):
        cells = []
        for b, link in zip(labels, row, strict=True):
            background, colour = link_colour(link)
            meaning = LINK_LEGEND.get("NV#" if link.startswith("NV") and link != "n/a" else link,
                                      "")
            cells.append(f'<td class="link" data-link="{html.escape(link)}" '
                         f'title="{html.escape(f"{a} - {b}: {link}: {meaning}")}" '
                         f'style="{_CELL};background:{background};color:{colour};'
                         f'font-weight:bold">{html.escape(link)}</td>')
        rows.append(f"<tr>{_th(a)}{''.join(cells)}{_td(_text(cpus), title=_why(cpus))}"
                    f"{_td(_text(node), title=_why(node))}</tr>")
    return (f'<table class="a800lab-topology" {_TABLE}><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


def legend_html() -> str:
    """Swatches for every link class with the `nvidia-smi topo -m` meaning, best first."""
    rows = []
    for key, meaning in LINK_LEGEND.items():
        examples = _LEGEND_NV_EXAMPLES if key == "NV#" else (key,)
        swatches = "".join(
            f'<span style="display:inline-block;min-width:3.2em;margin-right:2px;'
            f'text-align:center;background:{link_colour(k)[0]};color:{link_colour(k)[1]};'
            f'font-weight:bold">{html.escape(k)}</span>' for k in examples)
        rows.append(f'<tr data-legend="{html.escape(key)}">'
                    f'<td style="padding:1px 6px">{swatches}</td>'
                    f'<td style="padding:1px 6px">{html.escape(meaning)}</td></tr>')
    return (f'<table class="a800lab-legend" style="font-size:12px;line-height:1.4">'
            f'{"".join(rows)}</table>'
            "<p style='font-size:12px;line-height:1.4'>GPU-to-GPU traffic is fastest over NV# "
            "(more bonded links = more bandwidth) and slowest over SYS; keep a job's GPUs inside "
            "one NVLink group, PCIe switch or NUMA node.</p>")


def affinity_html(report: dict) -> str:
    """Each GPU's NUMA node and CPUs, with the command that keeps a process next to it."""
    rows = []
    for g in report["gpus"]:
        node, cpus = g["numa_node"], g["cpu_affinity"]
        if not _na(node):
            command = f"numactl --cpunodebind={node} --membind={node} python train.py"
        elif not _na(cpus):
            command = f"taskset -c {cpus} python train.py"
        else:
            command = "n/a (NVML gives no affinity)"
        command = f"CUDA_VISIBLE_DEVICES={g['index']} {command}"
        rows.append(f"<tr>{_td(str(g['index']))}{_td(_text(node), title=_why(node))}"
                    f"{_td(_text(cpus), title=_why(cpus))}"
                    f"{_td(command, style='text-align:left')}</tr>")
    head = "".join(_th(c) for c in ("GPU", "NUMA node", "CPUs", "run a one-GPU job next to it"))
    return (f'<table class="a800lab-affinity" {_TABLE}><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


def advice_html(report: dict) -> str:
    """Doctor's advice lines as a list; ECC and throttling lines stand out."""
    items = []
    for line in report.get("advice") or []:
        colour = ("#b00000" if "ECC errors" in line or line.startswith("No NVIDIA GPU") else
                  "#a04000" if "throttled" in line else "inherit")
        items.append(f'<li style="color:{colour}">{html.escape(line)}</li>')
    if not items:
        items.append("<li>Nothing to fix found.</li>")
    return (f'<ul class="a800lab-advice" style="font-size:13px;line-height:1.4">'
            f'{"".join(items)}</ul>')


def cpu_html(report: dict) -> str:
    """The CPU facts as a two-column table."""
    c = report.get("cpu") or {}
    facts = [("model", _text(c.get("model"))),
             ("cores", f"{_text(c.get('logical_cores'))} logical / "
                       f"{_text(c.get('physical_cores'))} physical"),
             ("NUMA nodes", _text(c.get("numa_nodes"))),
             ("memory", f"{_text(c.get('memory_total_bytes'), GIB, 1)} GiB"),
             ("ISA (torch CPU kernels)", _text(c.get("isa"))),
             ("torch threads", _text(c.get("torch_threads")))]
    rows = "".join(f"<tr>{_th(k)}{_td(v, style='text-align:left')}</tr>" for k, v in facts)
    return f'<table class="a800lab-cpu" {_TABLE}>{rows}</table>'


def system_html(report: dict) -> str:
    """One line of driver and library versions."""
    s = report.get("system")
    if not s:
        return ""
    return ("<p style='font-size:12px;line-height:1.4'>"
            f"Driver {html.escape(_text(s['driver_version']))} (CUDA "
            f"{html.escape(_text(s['cuda_driver_version']))}) | torch "
            f"{html.escape(str(s['torch_version']))} (CUDA "
            f"{html.escape(_text(s['torch_cuda_version']))}, cuDNN "
            f"{html.escape(_text(s['cudnn_version']))}, NCCL "
            f"{html.escape(_text(s['nccl_version']))}) | float32 matmul precision "
            f"{html.escape(str(s['float32_matmul_precision']))}</p>")


def no_gpu_html(report: dict) -> str:
    """The prominent CPU-only banner."""
    return ('<div class="a800lab-no-gpu" style="border:2px solid #d73027;background:#fff1ee;'
            'padding:8px 12px;margin:4px 0;font-size:14px;line-height:1.5">'
            f"<b>No NVIDIA GPU found:</b> {html.escape(report.get('no_gpu_reason') or '')}"
            "<br>The lab runs in <b>CPU fallback</b> mode: small float32 sizes, CPU timings, "
            "clearly labelled. Telemetry needs NVML and an NVIDIA GPU.</div>")


def _fallback_report(exc: Exception) -> dict:
    """A report-shaped dict for when discovery itself failed (a bug, not a missing GPU)."""
    try:
        cpu = cpu_info().to_dict()
    except Exception:  # keep the panel up whatever the host looks like
        cpu = {}
    why = f"device discovery failed: {type(exc).__name__}: {exc}"
    return {"system": None, "cpu": cpu, "gpu_found": False, "no_gpu_reason": why, "gpus": [],
            "topology": None, "advice": [f"No NVIDIA GPU found: {why}."]}


# ---- the panel ---------------------------------------------------------------------------------
class DevicePanel:
    """GPUs, topology, affinity, advice and live telemetry (see the module docstring)."""

    def __init__(self, nvml: Any = None, cuda_properties: list | None = None, *,
                 interval_s: float = 0.2, refresh_s: float = 1.0, window_s: float = 120.0,
                 max_duration_s: float = 3600.0):
        if not (interval_s > 0 and refresh_s > 0 and window_s > 0 and max_duration_s > 0):
            raise ValueError("interval_s, refresh_s, window_s and max_duration_s must be positive "
                             "numbers of seconds, e.g. interval_s=0.2, refresh_s=1")
        self._nvml, self._cuda_properties = nvml, cuda_properties
        self.interval_s, self.refresh_s = interval_s, refresh_s
        self.window_s, self.max_duration_s = window_s, max_duration_s
        self._lock = threading.Lock()
        self._render_lock = threading.Lock()
        self._sampler: TelemetrySampler | None = None
        self._refresher: threading.Thread | None = None
        self._stop_refresh = threading.Event()
        self._stop_note = ""
        self.telemetry_reason = ""  # why telemetry cannot run here; "" when it can
        self.telemetry_figure = None
        self.report: dict = {}
        self._build()
        self.refresh()

    # ---- layout ---------------------------------------------------------------------------
    def _build(self) -> None:
        self.title = widgets.HTML("<h3>Devices and topology</h3>")
        self.banner = widgets.HTML("")
        self.system = widgets.HTML("")
        self.status = widgets.HTML("")
        self.refresh_button = widgets.Button(description="Refresh", icon="refresh",
                                             tooltip="read NVML again (clocks, power, errors)")
        self.refresh_button.on_click(lambda _: self.refresh())
        self.gpu_table = widgets.HTML("")
        self.topology = widgets.HTML("")
        self.legend = widgets.HTML("")
        self.affinity = widgets.HTML("")
        self.cpu = widgets.HTML("")
        self.advice = widgets.HTML("")
        self.gpu_choice = widgets.Dropdown(options=[], description="GPU",
                                           layout=widgets.Layout(width="160px"))
        self.start_button = widgets.Button(description="Start", button_style="success",
                                           icon="play", tooltip="sample this GPU's telemetry")
        self.stop_button = widgets.Button(description="Stop", button_style="danger", icon="stop",
                                          disabled=True)
        self.start_button.on_click(lambda _: self.start_telemetry())
        self.stop_button.on_click(lambda _: self.stop_telemetry())
        self.telemetry_note = widgets.HTML("")
        self.latest = widgets.HTML("")
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

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)

    # ---- static sections ------------------------------------------------------------------
    def refresh(self) -> dict:
        """Read NVML and torch again and redraw the tables; returns the new report."""
        try:
            report = build_report(nvml=self._nvml, cuda_properties=self._cuda_properties)
            self._say("GPUs found." if report["gpu_found"] else "CPU only: no NVIDIA GPU.",
                      "ok" if report["gpu_found"] else "warn")
        except Exception as exc:  # the panel must come up whatever discovery does
            report = _fallback_report(exc)
            self._say(f"Device discovery failed: {type(exc).__name__}: {exc}", "error")
        self.report = report
        gpu_found = bool(report["gpu_found"])
        self.banner.value = "" if gpu_found else no_gpu_html(report)
        self.system.value = system_html(report)
        self.gpu_table.value = gpu_table_html(report) if gpu_found else ""
        self.topology.value = topology_html(report) if gpu_found else ""
        self.legend.value = legend_html() if gpu_found else ""
        self.affinity.value = affinity_html(report) if gpu_found else ""
        self.cpu.value = cpu_html(report)
        self.advice.value = advice_html(report)
        self._gpu_sections.layout.display = None if gpu_found else "none"
        self._configure_telemetry()
        return report

    def _telemetry_unavailable(self) -> str:
        """Why telemetry cannot run here ("" when it can)."""
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
        self.telemetry_reason = reason
        options = [(f"GPU{g['index']}", g["index"]) for g in self.report["gpus"]]
        if [o[1] for o in self.gpu_choice.options] != [o[1] for o in options]:
            self.gpu_choice.options = options
        running = self.telemetry_running
        self.gpu_choice.disabled = bool(reason) or running
        self.start_button.disabled = bool(reason) or running
        self.stop_button.disabled = not running
        self.telemetry_note.value = (
            f'<span style="color:#a04000;line-height:1.4">Telemetry unavailable: '
            f'{html.escape(reason)}</span>'
            if reason else
            f"<span style='font-size:12px'>Samples every {self.interval_s:g} s; the plot "
            f"refreshes every {self.refresh_s:g} s and shows the last {self.window_s:g} s; "
            "throttled periods are shaded red.</span>")

    # ---- telemetry ------------------------------------------------------------------------
    @property
    def telemetry_running(self) -> bool:
        return self._refresher is not None and self._refresher.is_alive()

    def start_telemetry(self, device_index: int | None = None) -> bool:
        """Start sampling GPU `device_index` (NVML index; default: the dropdown's choice).

        Returns False, with the reason in the status line, when it cannot start.
        """
        with self._lock:
            reason = self._telemetry_unavailable()
            if reason:
                self._say(f"Telemetry unavailable: {reason}", "warn")
                return False
            if self.telemetry_running:
                self._say("Telemetry is already running: press Stop first.", "warn")
                return False
            index = self.gpu_choice.value if device_index is None else device_index
            known = [g["index"] for g in self.report["gpus"]]
            if index not in known:
                self._say(f"Cannot sample GPU {index!r}: this machine has GPUs {known}.", "error")
                return False
            try:
                self._sampler = TelemetrySampler(index, interval_s=self.interval_s,
                                                 nvml=self._nvml).start()
            except Exception as exc:
                self._say(f"Telemetry failed to start: {type(exc).__name__}: {exc}", "error")
                return False
            if self.gpu_choice.value != index:
                self.gpu_choice.value = index
            self._stop_refresh.clear()
            self._refresher = threading.Thread(target=self._refresh_loop, daemon=True,
                                               name="a800lab-telemetry-plot")
            self._refresher.start()
            self._configure_telemetry()
            self._say(f"Sampling GPU {index} every {self.interval_s:g} s ...")
        self._render_telemetry()
        return True

    def stop_telemetry(self) -> None:
        """Stop sampling, take a last sample and draw the final plot. Safe to call twice."""
        with self._lock:
            refresher, self._refresher = self._refresher, None
            self._stop_refresh.set()
            if refresher is not None and refresher is not threading.current_thread():
                refresher.join()
            sampler = self._sampler
            if sampler is None:
                return
            try:
                sampler.stop()
            except Exception as exc:
                self._say(f"Telemetry stop failed: {type(exc).__name__}: {exc}", "error")
            self._configure_telemetry()
        self._render_telemetry()
        if refresher is not None:
            summary = sampler.summary()
            notes = [n for n in (self._stop_note, summary["reason"]) if n]
            problem = f" ({'; '.join(notes)})" if notes else ""
            self._stop_note = ""
            self._say(f"Stopped: {summary['n_samples']} samples of GPU {sampler.device_index} "
                      f"over {summary['duration_s']:.1f} s{problem}.",
                      "warn" if problem else "ok")

    def _refresh_loop(self) -> None:
        started = time.perf_counter()
        while not self._stop_refresh.wait(self.refresh_s):
            self._render_telemetry()
            if time.perf_counter() - started > self.max_duration_s:
                self._stop_note = f"max_duration_s={self.max_duration_s:g} s reached"
                threading.Thread(target=self.stop_telemetry, daemon=True).start()
                return

    def nvml_index_of(self, cuda_device: int = 0) -> int | None:
        """The NVML index (the panel's GPU numbers) of torch's `cuda:<cuda_device>`, matched by
        UUID; None when torch has no such device or NVML does not list it (e.g. a MIG slice).

        The numberings differ under CUDA_VISIBLE_DEVICES or without CUDA_DEVICE_ORDER=PCI_BUS_ID.
        """
        props = self._cuda_properties
        if props is None:
            props = ([torch.cuda.get_device_properties(i)
                      for i in range(torch.cuda.device_count())] if HAS_CUDA else [])
        if not 0 <= cuda_device < len(props):
            return None
        uuid = str(getattr(props[cuda_device], "uuid", "")).lower().removeprefix("gpu-")
        for g in self.report.get("gpus", []):
            if uuid and str(g["uuid"]).lower().removeprefix("gpu-") == uuid:
                return g["index"]
        return None

    @property
    def telemetry_samples(self) -> list[dict]:
        """Every sample of the current or last telemetry run (t_s = seconds since Start)."""
        return [] if self._sampler is None else self._sampler.samples

    def telemetry_summary(self) -> dict:
        """TelemetrySampler.summary() of the current or last run ({} before the first)."""
        return {} if self._sampler is None else self._sampler.summary()

    def _render_telemetry(self) -> None:
        """Redraw the telemetry plot and the latest-reading line from the sampler's samples."""
        samples = self.telemetry_samples
        if samples:
            last_t = samples[-1]["t_s"]
            samples = [s for s in samples if s["t_s"] >= last_t - self.window_s]
        try:
            with self._render_lock:
                figure = telemetry_figure(samples)
                buf = io.BytesIO()
                figure.savefig(buf, format="png", dpi=72)
                self.telemetry_figure = figure
                self.plot.value = buf.getvalue()
                self.plot.layout.display = None
                self.latest.value = _latest_html(samples[-1]) if samples else ""
        except Exception as exc:  # a bad reading must not kill the refresher or the panel
            self._say(f"Telemetry plot failed: {type(exc).__name__}: {exc}", "error")
        reason = self._sampler._reason if self._sampler is not None else ""
        if reason:
            self._say(f"Telemetry: {reason}", "error")

    # ---- text -----------------------------------------------------------------------------
    def to_html(self) -> str:
        """Every visible HTML part of the panel, in display order (for tests and saved reports)."""
        parts: list[str] = []

        def walk(w: Any) -> None:
            if getattr(getattr(w, "layout", None), "display", None) == "none":
                return  # a hidden section (e.g. the GPU tables on a CPU-only machine)
            if isinstance(w, widgets.HTML):
                parts.append(w.value)
            for child in getattr(w, "children", ()):
                walk(child)

        walk(self.widget)
        return "\n".join(parts)

    def _say(self, text: str, level: str = "info") -> None:
        colour = {"ok": "green", "warn": "darkorange", "error": "crimson"}.get(level, "inherit")
        self.status.value = f'<span style="color:{colour}">{html.escape(text)}</span>'

    @property
    def status_text(self) -> str:
        """The status line as plain text."""
        return html.unescape(self.status.value.split(">", 1)[1].rsplit("<", 1)[0])


def _latest_html(s: dict) -> str:
    reasons = [r for r in s.get("throttle_reasons") or () if r != "gpu_idle"]
    throttle = (f'; <b style="color:#b00000">throttled: {html.escape(", ".join(reasons))}</b>'
                if reasons else "")
    return (f"<span style='font-size:12px'>latest (t={s['t_s']:.1f} s): util "
            f"{_text(s.get('gpu_util_pct'))} %, memory {_text(s.get('mem_used_bytes'), GIB, 1)}"
            f" GiB, power {_text(s.get('power_w'))} W, SM {_text(s.get('sm_clock_mhz'))} MHz, "
            f"{_text(s.get('temperature_c'))} C{throttle}</span>")
