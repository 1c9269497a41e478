"""`a800lab doctor`: the environment and topology report, with advice on what to fix; a plain
JSON-ready dict, so a report saved on another machine can be read again.

    report = build_report(); print(format_report(report)); advice(report)
"""

from typing import Any

from .cuda_compat import cuda_runtime_problem, version_tuple
from .device import LINK_LEGEND, cpu_info, discover_gpus, system_info, topology
from .nccl_env import settings_that_matter
from .nvml import NotAvailable, is_not_available, or_none

# What each throttle reason usually means, for the advice line.
_THROTTLE_HINTS = {
    "sw_power_cap": "at its power limit (nvidia-smi -q -d POWER)",
    "hw_slowdown": "hardware slowdown (power supply or overheating)",
    "hw_power_brake": "external power brake asserted (power supply)",
    "sw_thermal_slowdown": "too hot, driver lowered clocks (check cooling)",
    "hw_thermal_slowdown": "too hot, hardware lowered clocks (check cooling/airflow)",
    "applications_clocks_setting": "application clocks set below max (nvidia-smi -rac resets)",
    "sync_boost": "held to the clocks of its sync-boost group",
    "display_clock_setting": "held by the display clock setting",
    # pynvml's BoardLimit (0x200) and Reliability (0x400); NVML's header gives no more detail
    "board_limit": "held by a limit of the board itself (see nvidia-smi -q -d PERFORMANCE,POWER)",
    "reliability": "held by NVML's reliability limiter, which protects the GPU's lifetime, e.g. "
                   "its voltage (see nvidia-smi -q -d PERFORMANCE,TEMPERATURE)",
}


# The advice names GPUs by NVML index (PCI bus order, as nvidia-smi does); CUDA numbers them the
# same way only with CUDA_DEVICE_ORDER=PCI_BUS_ID (its default puts the fastest first).
CUDA_BY_NVML_INDEX = "CUDA_DEVICE_ORDER=PCI_BUS_ID "

# How to turn TF32 on, per torch API (SystemInfo.tf32_api). torch asks not to mix the two: its
# legacy getters raise once the fp32_precision settings hold a value they cannot express.
_TF32_HOWTO = {
    "fp32_precision": "set torch.backends.cuda.matmul.fp32_precision = 'tf32' (and "
                      "torch.backends.cudnn.conv.fp32_precision = 'tf32' for convolutions); use "
                      "these settings only, not torch.set_float32_matmul_precision or allow_tf32, "
                      "which torch keeps for older code.",
    "allow_tf32": "call torch.set_float32_matmul_precision('high') (and set "
                  "torch.backends.cudnn.allow_tf32 = True for convolutions).",
}


def build_report(nvml: Any = None, cuda_properties: list | None = None) -> dict:
    """Collect system, CPU, GPU and topology facts plus advice lines into one JSON-ready dict."""
    gpus = discover_gpus(nvml=nvml, cuda_properties=cuda_properties)
    system = system_info(nvml=nvml).to_dict()
    report: dict[str, Any] = {"system": system, "cpu": cpu_info().to_dict(),
                              "environ": settings_that_matter()}
    if isinstance(gpus, NotAvailable) or not gpus:
        torch_reason = system["torch_cuda_usable"]
        why = gpus.reason if isinstance(gpus, NotAvailable) else "NVML lists no GPUs"
        if is_not_available(torch_reason):
            why += f"; torch: {torch_reason['reason']}"
        report.update(gpu_found=False, no_gpu_reason=why, gpus=[], topology=None)
    else:
        report.update(gpu_found=True, no_gpu_reason="", gpus=[g.to_dict() for g in gpus],
                      topology=topology(gpus, nvml=nvml).to_dict())
    report["advice"] = advice(report)
    return report


def _nvlink_groups(report: dict) -> list[list[int]]:
    """GPUs joined by NVLink (connected components of NV# entries), else by NUMA node."""
    topo, gpus = report["topology"], report["gpus"]
    parent = {g["index"]: g["index"] for g in gpus}

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    nvlinked = False
    for a, row in zip(gpus, topo["matrix"], strict=True):
        for b, link in zip(gpus, row, strict=True):
            if link.startswith("NV"):
                nvlinked = True
                parent[root(a["index"])] = root(b["index"])
    groups: dict[Any, list[int]] = {}
    for g in gpus:
        key = root(g["index"]) if nvlinked else str(g["numa_node"])
        groups.setdefault(key, []).append(g["index"])
    return list(groups.values())


def _topology_advice(report: dict) -> list[str]:
    topo, gpus = report["topology"], report["gpus"]
    numa = {g["index"]: or_none(g["numa_node"]) for g in gpus}
    far = []
    for i, (a, row) in enumerate(zip(gpus, topo["matrix"], strict=True)):
        for b, link in list(zip(gpus, row, strict=True))[i + 1:]:
            cross_numa = None not in (numa[a["index"]], numa[b["index"]]) and \
                numa[a["index"]] != numa[b["index"]]
            if not link.startswith("NV") and (link == "SYS" or cross_numa):
                far.append(f"{a['index']}-{b['index']}")
    if not far:
        return []
    groups = _nvlink_groups(report)
    best = groups[0]
    node = numa[best[0]]
    numactl = f"numactl --cpunodebind={node} --membind={node} " if node is not None else ""
    described = "; ".join(f"GPUs {','.join(map(str, g))} (NUMA node {numa[g[0]]})"
                          for g in groups)
    unplaced = [str(g["index"]) for g, n in zip(gpus, topo["nvlink_unknown_links"], strict=True)
                if n]
    no_nvlink = "no NVLink" if not unplaced else (
        f"no NVLink NVML can place: it cannot tell where the NVLinks of GPU(s) "
        f"{','.join(unplaced)} lead")
    return [f"GPU pairs joined only through SYS / across NUMA nodes ({no_nvlink}): "
            f"{', '.join(far)}."
            f" Collective traffic between them crosses the CPU interconnect. Keep a job inside "
            f"one NVLink group / NUMA node: {described}; e.g. "
            f"{CUDA_BY_NVML_INDEX}CUDA_VISIBLE_DEVICES={','.join(map(str, best))} {numactl}"
            "python train.py"]


def _gpu_advice(gpu: dict) -> list[str]:
    lines, i = [], gpu["index"]
    ecc = {key: or_none(count) or 0 for key, count in gpu["ecc_errors"].items()}
    if any(ecc.values()):
        lines.append(
            f"GPU {i} has ECC errors: uncorrected {ecc.get('volatile_uncorrected', 0)} since "
            f"boot / {ecc.get('aggregate_uncorrected', 0)} lifetime, corrected "
            f"{ecc.get('volatile_corrected', 0)} / {ecc.get('aggregate_corrected', 0)}. "
            f"Uncorrected errors can corrupt results or kill jobs: check "
            f"`nvidia-smi -q -d ECC,ROW_REMAPPER -i {i}` and drain the GPU if they grow.")
    reasons = [r for r in or_none(gpu["throttle_reasons"]) or () if r != "gpu_idle"]
    if reasons:
        why = "; ".join(f"{r}: {_THROTTLE_HINTS.get(r, 'see nvidia-smi -q -d PERFORMANCE')}"
                        for r in reasons)
        lines.append(
            f"GPU {i} clocks are throttled ({', '.join(reasons)}): SM "
            f"{_fmt(gpu['sm_clock_mhz'])}/{_fmt(gpu['sm_clock_max_mhz'])} MHz, "
            f"{_fmt(gpu['temperature_c'])} C, {_fmt(gpu['power_w'])}/{_fmt(gpu['power_limit_w'])}"
            f" W. {why}. Measurements on it will be low.")
    return lines


def with_defaults(report: dict) -> dict:
    """A report saved by an earlier a800lab with the keys this one reads filled in from what it
    had (TF32 from the legacy settings; no CUDA ordinal; no unplaced NVLinks)."""
    system = dict(report.get("system") or {})
    if "matmul_fp32_precision" not in system and "float32_matmul_precision" in system:
        legacy = system["float32_matmul_precision"]
        system.update(matmul_fp32_precision="ieee" if legacy == "highest" else "tf32",
                      conv_fp32_precision="tf32" if system.get("cudnn_allow_tf32") else "ieee",
                      tf32_api="allow_tf32")
    old = NotAvailable("not recorded by the a800lab that wrote this report").to_dict()
    gpus = [{"cuda_index": old, **g} for g in report.get("gpus") or []]
    topo = report.get("topology")
    if topo:
        topo = {"nvlink_unknown_links": [0] * len(topo["labels"]), **topo}
    return {**report, "system": system, "gpus": gpus, "topology": topo}


def advice(report: dict) -> list[str]:
    """Plain-language advice lines for a report from build_report (possibly re-read from JSON,
    also one saved by an earlier a800lab)."""
    report = with_defaults(report)
    system = report["system"]
    if not report["gpu_found"]:
        return [f"No NVIDIA GPU found: {report['no_gpu_reason']}. The lab runs in CPU fallback "
                f"mode (small sizes, CPU timings)."]
    gpus, lines = report["gpus"], []
    if is_not_available(system["torch_cuda_usable"]):
        lines.append(f"NVML sees {len(gpus)} GPU(s) but torch cannot use them: "
                     f"{system['torch_cuda_usable']['reason']}.")
    ampere = [g["index"] for g in gpus
              if (version_tuple(or_none(g["compute_capability"])) or (0,)) >= (8, 0)]
    if ampere and system["matmul_fp32_precision"] == "ieee":
        lines.append(
            f"TF32 is off for float32 matmuls although GPU(s) {','.join(map(str, ampere))} have "
            "TF32 TensorCores: float32 matmuls run several times slower. If ~1e-3 relative error "
            f"is fine, {_TF32_HOWTO[system['tf32_api']]}")
    problem = cuda_runtime_problem(or_none(system["torch_cuda_version"]),
                                   or_none(system["cuda_driver_version"]),
                                   _fmt(system["driver_version"]))
    if problem:
        lines.append(problem + ".")
    mig = [str(g["index"]) for g in gpus if or_none(g["mig_enabled"])]
    if mig:
        lines.append(
            f"MIG is on for GPU(s) {','.join(mig)}: CUDA sees MIG instances (slices of SMs and "
            "memory), not whole GPUs, and no NVLink between them; numbers measured here describe "
            "one slice. To use whole GPUs: sudo nvidia-smi -i <index> -mig 0, then reset the GPU.")
    for gpu in gpus:
        lines.extend(_gpu_advice(gpu))
    if report["topology"]:
        lines.extend(_topology_advice(report))
    return lines


def format_reading(value: Any, scale: float = 1.0, digits: int = 0, sep: str = ",") -> str:
    """A report value as table text: "n/a" where not available, numbers scaled and rounded,
    booleans on/off, lists joined with `sep`."""
    value = or_none(value)
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, int | float):
        return f"{value / scale:.{digits}f}"
    if isinstance(value, list | tuple):
        return sep.join(map(str, value)) or "-"
    return str(value)


_fmt = format_reading  # the short name the report tables below use


def cuda_label(cuda_index: Any) -> str:
    """A GPU's torch device name from the report: "cuda:3", or "n/a" when torch cannot see it."""
    value = or_none(cuda_index)
    return "n/a" if value is None else f"cuda:{value}"


def table_lines(headers, rows) -> list[str]:
    """Columns padded to their widest cell, two spaces apart."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows,
                                                                      strict=True)]
    return ["  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in [headers, *rows]]


def format_report(report: dict) -> str:
    """The report as plain text: system lines, GPU table, topology matrix, legend, advice."""
    report = with_defaults(report)
    s, c = report["system"], report["cpu"]
    # TF32 settings only mean something where a GPU runs the float32 products
    tf32 = (f" | float32 on GPU: matmul {s['matmul_fp32_precision']}, conv "
            f"{s['conv_fp32_precision']}") if report.get("gpu_found") else ""
    out = [
        f"Driver {_fmt(s['driver_version'])} (CUDA {_fmt(s['cuda_driver_version'])}) | torch "
        f"{s['torch_version']} (CUDA {_fmt(s['torch_cuda_version'])}, cuDNN "
        f"{_fmt(s['cudnn_version'])}, NCCL {_fmt(s['nccl_version'])}){tf32}",
        f"CPU {c['model']}: {c['logical_cores']} logical / {_fmt(c['physical_cores'])} physical "
        f"cores, {_fmt(c['numa_nodes'])} NUMA node(s), {_fmt(c['memory_total_bytes'], 2**30)} "
        f"GiB RAM, torch {c['torch_threads']} threads, ISA {c['isa']}",
        "",
    ]
    if report.get("environ"):  # reports before this field have none
        out[-1:] = [f"Set: {' '.join(f'{k}={v}' for k, v in report['environ'].items())}", ""]
    if report["gpus"]:
        rows = [[str(g["index"]), cuda_label(g["cuda_index"]), _fmt(g["name"]),
                 _fmt(g["compute_capability"]), _fmt(g["sm_count"]),
                 f"{_fmt(g['memory_free_bytes'], 2**30)}/{_fmt(g['memory_total_bytes'], 2**30)}",
                 _fmt(g["ecc_enabled"]), _fmt(g["mig_enabled"]),
                 f"{_fmt(g['sm_clock_mhz'])}/{_fmt(g['sm_clock_max_mhz'])}",
                 f"{_fmt(g['power_w'])}/{_fmt(g['power_limit_w'])}", _fmt(g["temperature_c"]),
                 f"gen{_fmt(g['pcie_gen'])} x{_fmt(g['pcie_width'])}",
                 _fmt(g["nvlink_active_links"]), _fmt(g["throttle_reasons"])]
                for g in report["gpus"]]
        headers = ["GPU", "torch", "name", "CC", "SMs", "free/total GiB", "ECC", "MIG", "SM MHz",
                   "power W", "temp C", "PCIe", "NVLinks", "throttle"]
        out += [*table_lines(headers, rows), ""]
    topo = report["topology"]
    if topo:
        rows = [[label, *row, _fmt(aff), _fmt(node)] for label, row, aff, node in zip(
            topo["labels"], topo["matrix"], topo["cpu_affinity"], topo["numa_node"], strict=True)]
        out += table_lines(["", *topo["labels"], "CPU Affinity", "NUMA Affinity"], rows)
        out += ["", "Legend:", *(f"  {key:<4} = {text}" for key, text in LINK_LEGEND.items()), ""]
    out.append("Advice:")
    out += [f"  - {line}" for line in report["advice"]] or ["  - nothing to fix found."]
    return "\n".join(out)
