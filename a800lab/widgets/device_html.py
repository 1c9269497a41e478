"""The device panel's HTML, pure functions of doctor's report dict; a value NVML could not
give shows as "n/a" with the reason on hover.

    html = gpu_table_html(build_report()) + topology_html(build_report())
"""

import html
from typing import Any

from ..core.device import LINK_LEGEND
from ..core.doctor import CUDA_BY_NVML_INDEX, cuda_label, format_reading
from ..core.nvml import is_not_available
from ..core.units import GIB

# Link class -> (background, text colour): green for NVLink, yellow-orange for PCIe paths of
# growing length, red for crossing the CPU-to-CPU interconnect.
LINK_COLOURS = {"X": ("#e0e0e0", "#555555"), "PIX": ("#d9ef8b", "#000000"),
                "PXB": ("#fee08b", "#000000"), "PHB": ("#fdae61", "#000000"),
                "NODE": ("#f46d43", "#000000"), "SYS": ("#d73027", "#ffffff"),
                "n/a": ("#bdbdbd", "#000000")}
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


def cell_text(value: Any, scale: float = 1.0, digits: int = 0) -> str:
    return format_reading(value, scale, digits, sep=", ")


def _why(*values: Any) -> str:
    reasons = [v["reason"] if isinstance(v, dict) else v.reason
               for v in values if is_not_available(v)]
    return "; ".join(dict.fromkeys(reasons))


def _td(text: str, *, title: str = "", style: str = "") -> str:
    tip = f' title="{html.escape(title)}"' if title else ""
    return f'<td style="{_CELL};{style}"{tip}>{html.escape(text)}</td>'


def _reading(value: Any) -> str:
    return _td(cell_text(value), title=_why(value))


def _th(text: str) -> str:
    return f'<th style="{_CELL};background:#f0f0f0">{html.escape(text)}</th>'


def _pair(a: Any, b: Any, scale: float = 1.0, digits: int = 0) -> str:
    return f"{cell_text(a, scale, digits)}/{cell_text(b, scale, digits)}"


GPU_COLUMNS = ("GPU", "name", "CC", "SMs", "torch", "memory free/total GiB", "driver / CUDA", "ECC",
               "ECC errors (unc. / corr.)", "MIG", "SM MHz cur/max", "power W cur/limit",
               "temp C", "PCIe", "NVLinks", "throttle reasons")


def gpu_table_html(report: dict) -> str:
    """One row per GPU; problems coloured."""
    system, topo = report["system"], report.get("topology") or {}
    driver = f"{cell_text(system['driver_version'])} / {cell_text(system['cuda_driver_version'])}"
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
                         "idle" if not _na(reasons) and reasons else cell_text(reasons))
        temp = g["temperature_c"]
        hot = not _na(temp) and temp >= 85
        pcie = f"gen{cell_text(g['pcie_gen'])} x{cell_text(g['pcie_width'])}"
        if (g["pcie_gen"], g["pcie_width"]) != (g["pcie_gen_max"], g["pcie_width_max"]):
            pcie += f" (max gen{cell_text(g['pcie_gen_max'])} x{cell_text(g['pcie_width_max'])})"
        links = cell_text(g["nvlink_active_links"]) + (" to NVSwitch" if on_switch else "")
        cells = [
            _td(str(g["index"])), _td(cell_text(g["name"]), title=cell_text(g["uuid"])),
            _reading(g["compute_capability"]), _reading(g["sm_count"]),
            _td(cuda_label(g["cuda_index"]), title=_why(g["cuda_index"])),
            _td(_pair(g["memory_free_bytes"], g["memory_total_bytes"], GIB, 1),
                title=_why(g["memory_free_bytes"])),
            _td(driver, title=_why(system["driver_version"])), _reading(g["ecc_enabled"]),
            _td(ecc_text, style=ecc_style, title="uncorrected volatile/aggregate / corrected "
                "volatile/aggregate (volatile = since boot, aggregate = lifetime)"),
            _td(cell_text(g["mig_enabled"]), title=_why(g["mig_enabled"]),
                style="color:#a04000;font-weight:bold" if g["mig_enabled"] is True else ""),
            _td(_pair(g["sm_clock_mhz"], g["sm_clock_max_mhz"]), title=_why(g["sm_clock_mhz"])),
            _td(_pair(g["power_w"], g["power_limit_w"]),
                title=_why(g["power_w"]) or f"power source: {cell_text(g['power_source'])}"),
            _td(cell_text(temp), title=_why(temp),
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
    """The link matrix as a coloured grid (cells carry data-link="NV4" etc.)."""
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
            meaning = LINK_LEGEND.get("NV#" if link.startswith("NV") else link, "")
            cells.append(f'<td class="link" data-link="{html.escape(link)}" '
                         f'title="{html.escape(f"{a} - {b}: {link}: {meaning}")}" '
                         f'style="{_CELL};background:{background};color:{colour};'
                         f'font-weight:bold">{html.escape(link)}</td>')
        rows.append(f"<tr>{_th(a)}{''.join(cells)}{_reading(cpus)}{_reading(node)}</tr>")
    return (f'<table class="a800lab-topology" {_TABLE}><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


def legend_html() -> str:
    """A swatch and the `nvidia-smi topo -m` meaning of every link class, best first."""
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
    """Each GPU's NUMA node and CPUs, with the command that runs a process next to it."""
    rows = []
    for g in report["gpus"]:
        node, cpus = g["numa_node"], g["cpu_affinity"]
        if not _na(node):
            command = f"numactl --cpunodebind={node} --membind={node} python train.py"
        elif not _na(cpus):
            command = f"taskset -c {cpus} python train.py"
        else:
            command = "n/a (NVML gives no affinity)"
        command = f"{CUDA_BY_NVML_INDEX}CUDA_VISIBLE_DEVICES={g['index']} {command}"
        rows.append(f"<tr>{_td(str(g['index']))}{_reading(node)}{_reading(cpus)}"
                    f"{_td(command, style='text-align:left')}</tr>")
    head = "".join(_th(c) for c in ("GPU", "NUMA node", "CPUs", "run a one-GPU job next to it"))
    return (f'<table class="a800lab-affinity" {_TABLE}><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


def advice_html(report: dict) -> str:
    """Doctor's advice; ECC and throttling lines stand out."""
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
    c = report.get("cpu") or {}
    facts = [("model", cell_text(c.get("model"))),
             ("cores", f"{cell_text(c.get('logical_cores'))} logical / "
                       f"{cell_text(c.get('physical_cores'))} physical"),
             ("NUMA nodes", cell_text(c.get("numa_nodes"))),
             ("memory", f"{cell_text(c.get('memory_total_bytes'), GIB, 1)} GiB"),
             ("ISA (torch CPU kernels)", cell_text(c.get("isa"))),
             ("torch threads", cell_text(c.get("torch_threads")))]
    rows = "".join(f"<tr>{_th(k)}{_td(v, style='text-align:left')}</tr>" for k, v in facts)
    return f'<table class="a800lab-cpu" {_TABLE}>{rows}</table>'


def system_html(report: dict) -> str:  # driver and library versions
    s = report.get("system")
    if not s:
        return ""
    line = (f"Driver {cell_text(s['driver_version'])} (CUDA {cell_text(s['cuda_driver_version'])})"
            f" | torch {s['torch_version']} (CUDA {cell_text(s['torch_cuda_version'])}, cuDNN "
            f"{cell_text(s['cudnn_version'])}, NCCL {cell_text(s['nccl_version'])}) | float32 on "
            f"GPU: matmul {s['matmul_fp32_precision']}, conv {s['conv_fp32_precision']}")
    return f"<p style='font-size:12px;line-height:1.4'>{html.escape(line)}</p>"


def no_gpu_html(report: dict) -> str:
    return ('<div class="a800lab-no-gpu" style="border:2px solid #d73027;background:#fff1ee;'
            'padding:8px 12px;margin:4px 0;font-size:14px;line-height:1.5">'
            f"<b>No NVIDIA GPU found:</b> {html.escape(report.get('no_gpu_reason') or '')}"
            "<br>The lab runs in <b>CPU fallback</b> mode: small float32 sizes, CPU timings, "
            "clearly labelled. Telemetry needs NVML and an NVIDIA GPU.</div>")


def latest_telemetry_html(s: dict) -> str:
    """The newest telemetry sample; throttling (other than idle) in red."""
    reasons = [r for r in s.get("throttle_reasons") or () if r != "gpu_idle"]
    throttle = (f'; <b style="color:#b00000">throttled: {html.escape(", ".join(reasons))}</b>'
                if reasons else "")
    util, power = cell_text(s.get("gpu_util_pct")), f"{cell_text(s.get('power_w'))} W"
    if s.get("power_source") == "average_1s":
        power += " (1 s average)"
    memory_gib = cell_text(s.get("mem_used_bytes"), GIB, 1)
    sm_mhz, temp_c = cell_text(s.get("sm_clock_mhz")), cell_text(s.get("temperature_c"))
    return (f"<span style='font-size:12px'>latest (t={s['t_s']:.1f} s): util {util} %, "
            f"memory {memory_gib} GiB, power {power}, SM {sm_mhz} MHz, {temp_c} C{throttle}"
            "</span>")
