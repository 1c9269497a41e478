"""What hardware is here: GPUs (NVML and torch), the CPU, and the GPU-GPU topology. A field
NVML or torch cannot give is NotAvailable(reason); GPU indices are NVML's, each GpuInfo naming
torch's cuda:N (core.gpu_map).

    gpus = discover_gpus(); topology(gpus).to_dict(); system_info(); cpu_info()
"""

import dataclasses
import os
from pathlib import Path
from typing import Any

import torch

from .backends import HAS_CUDA, why_unavailable
from .environment import cpu_model, nccl_version
from .gpu_map import cuda_device_properties, cuda_ordinal_of, pci_bus_id
from .memory import read_kib_file
from .nvml import (
    NotAvailable,
    cuda_version_string,
    device_count,
    device_handle,
    milli_to_unit,
    nvml_call,
    nvml_const,
    power_reading,
    temperature_c,
    throttle_reasons,
    to_jsonable,
)
from .precision import tf32_settings

# The link classes of `nvidia-smi topo -m`, best first.
LINK_LEGEND = {
    "X": "Self",
    "NV#": "Connection traversing a bonded set of # NVLinks",
    "PIX": "Connection traversing at most a single PCIe bridge",
    "PXB": "Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    "PHB": "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
    "NODE": "Connection traversing PCIe as well as the interconnect between PCIe Host Bridges "
            "within a NUMA node",
    "SYS": "Connection traversing PCIe as well as the SMP interconnect between NUMA nodes "
           "(e.g., QPI/UPI)",
    "n/a": "NVML could not tell",
}
# NVML's device types at the far end of an NVLink (nvmlDeviceGetNvLinkRemoteDeviceType)
_REMOTE_KINDS = {"NVML_NVLINK_DEVICE_TYPE_GPU": "gpu", "NVML_NVLINK_DEVICE_TYPE_SWITCH": "switch",
                 "NVML_NVLINK_DEVICE_TYPE_IBMNPU": "ibmnpu"}
_ANCESTOR_CLASS = {"NVML_TOPOLOGY_INTERNAL": "PIX", "NVML_TOPOLOGY_SINGLE": "PIX",
                   "NVML_TOPOLOGY_MULTIPLE": "PXB", "NVML_TOPOLOGY_HOSTBRIDGE": "PHB",
                   "NVML_TOPOLOGY_NODE": "NODE", "NVML_TOPOLOGY_SYSTEM": "SYS"}
# nvmlDeviceGetCpuAffinity wants the mask length in 64-bit words; ask for at least 256 CPUs so a
# box bigger than os.cpu_count() suggests (e.g. inside a container) is not cut off.
_AFFINITY_WORDS = max(4, -(-(os.cpu_count() or 1) // 64))
_NODE_WORDS = 4  # node set for nvmlDeviceGetMemoryAffinity: NUMA node ids up to 255
SYSFS_PCI_DEVICES = Path("/sys/bus/pci/devices")  # <bus id>/numa_node: the kernel's answer


class _Record:
    """to_dict() for the dataclasses below: fields in order, NotAvailable as its JSON form."""

    def to_dict(self) -> dict:
        return {f.name: to_jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}


@dataclasses.dataclass(frozen=True)
class GpuInfo(_Record):
    """One GPU as NVML (and torch, for the SM count) sees it. Units are in the names."""

    index: int                       # NVML's (nvidia-smi's) number
    cuda_index: Any                  # torch's N of cuda:N; NotAvailable when torch cannot see it
    name: Any
    uuid: Any
    pci_bus_id: Any
    compute_capability: Any          # "8.0"
    sm_count: Any
    memory_total_bytes: Any
    memory_free_bytes: Any
    ecc_enabled: Any
    ecc_errors: dict                 # volatile/aggregate x corrected/uncorrected -> count
    mig_enabled: Any
    sm_clock_mhz: Any
    sm_clock_max_mhz: Any
    mem_clock_mhz: Any
    mem_clock_max_mhz: Any
    power_w: Any
    power_source: Any                # "instant", "average_1s" or "power_usage" (nvml.power_reading)
    power_limit_w: Any
    temperature_c: Any
    throttle_reasons: Any            # tuple of names, e.g. ("sw_power_cap",); () = full speed
    pcie_gen: Any
    pcie_gen_max: Any
    pcie_width: Any
    pcie_width_max: Any
    nvlink_active_links: Any
    nvlink_remote_types: tuple       # per active link: "gpu", "switch" or "ibmnpu" at its far end
    nvlink_remote_bus_ids: tuple     # per active link: the far end's PCI bus id
    cpu_affinity: Any                # compact CPU list, e.g. "0-31,64-95"
    numa_node: Any


@dataclasses.dataclass(frozen=True)
class SystemInfo(_Record):
    """Driver and library versions plus the torch settings that change matmul results."""

    driver_version: Any
    cuda_driver_version: Any         # highest CUDA the driver supports, e.g. "12.2"
    torch_version: str
    torch_cuda_version: Any          # CUDA torch was built with, e.g. "12.4"
    cudnn_version: Any
    nccl_version: Any
    torch_cuda_usable: Any           # True, or NotAvailable(why torch cannot use a GPU)
    matmul_fp32_precision: str       # "tf32" or "ieee": what float32 matmuls on CUDA compute in
    conv_fp32_precision: str         # the same for cuDNN convolutions
    tf32_api: str                    # "fp32_precision" (torch's current API) or "allow_tf32"


@dataclasses.dataclass(frozen=True)
class CpuInfo(_Record):
    """The host CPU and memory, and what torch uses of it."""

    model: str
    logical_cores: int
    physical_cores: Any
    numa_nodes: Any
    memory_total_bytes: Any
    torch_threads: int
    isa: str                         # torch's CPU kernel level, e.g. "AVX512"


@dataclasses.dataclass(frozen=True)
class Topology(_Record):
    """GPU-to-GPU link classes (like `nvidia-smi topo -m`) and each GPU's host affinity."""

    labels: tuple                    # ("GPU0", "GPU1", ...)
    matrix: tuple                    # matrix[i][j]: "X", "NV4", "PXB", "SYS", ...
    cpu_affinity: tuple
    numa_node: tuple
    nvlink_peers: tuple              # per GPU: {peer index: number of direct NVLinks}
    nvswitch_links: tuple            # per GPU: active links that end on an NVSwitch
    nvlink_unknown_links: tuple      # per GPU: active links whose far end NVML cannot tell
    legend: dict = dataclasses.field(default_factory=lambda: dict(LINK_LEGEND))


def cpu_list(mask_words: Any) -> str:
    """A CPU bitmask (64-bit words, lowest CPUs first) as a compact list: "0-31,64-95"."""
    return compact_ranges([64 * w + bit for w, word in enumerate(mask_words) for bit in range(64)
                           if int(word) >> bit & 1])


def compact_ranges(numbers: list[int]) -> str:
    """Ascending ints as a compact list: [0, 1, 2, 5] -> "0-2,5"."""
    ranges: list[list[int]] = []
    for n in numbers:
        if ranges and n == ranges[-1][1] + 1:
            ranges[-1][1] = n
        else:
            ranges.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def _ecc_errors(handle: Any, nvml: Any) -> dict:
    return {f"{counter}_{kind}": nvml_call(
                "nvmlDeviceGetTotalEccErrors", handle,
                nvml_const(f"NVML_MEMORY_ERROR_TYPE_{kind.upper()}", nvml),
                nvml_const(f"NVML_{counter.upper()}_ECC", nvml), nvml=nvml)
            for counter in ("volatile", "aggregate") for kind in ("corrected", "uncorrected")}


def _remote_kind(handle: Any, link: int, nvml: Any) -> Any:
    """What NVLink `link` ends on: "gpu", "switch" (an NVSwitch) or "ibmnpu" (an IBM POWER CPU)."""
    kind = nvml_call("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link, nvml=nvml)
    if isinstance(kind, NotAvailable):
        return kind
    names = {nvml_const(constant, nvml): name for constant, name in _REMOTE_KINDS.items()}
    return names.get(kind, NotAvailable(f"NVML names no device type for link {link} ({kind})"))


def _nvlinks(handle: Any, nvml: Any) -> tuple[Any, tuple, tuple]:
    """(number of active links or NotAvailable, the kind of device at the far end of each active
    link, and its PCI bus id); each kind or bus id NVML cannot give is NotAvailable on its own."""
    max_links = nvml_const("NVML_NVLINK_MAX_LINKS", nvml)
    if isinstance(max_links, NotAvailable):
        return max_links, (), ()
    enabled = nvml_const("NVML_FEATURE_ENABLED", nvml)
    kinds, remotes, answered, first_failure = [], [], False, None
    for link in range(max_links):
        state = nvml_call("nvmlDeviceGetNvLinkState", handle, link, nvml=nvml)
        if isinstance(state, NotAvailable):  # links past the device's count answer this way
            first_failure = state if first_failure is None else first_failure
            continue
        answered = True
        if state == enabled:
            kinds.append(_remote_kind(handle, link, nvml))
            remotes.append(pci_bus_id(
                nvml_call("nvmlDeviceGetNvLinkRemotePciInfo", handle, link, nvml=nvml)))
    return (len(kinds) if answered else first_failure), tuple(kinds), tuple(remotes)


def _enabled(pair: Any, on_value: Any) -> Any:
    """NVML's [current, pending] mode pair -> is the current mode on?"""
    return pair if isinstance(pair, NotAvailable) else pair[0] == on_value


def _numa_node(handle: Any, bus_id: Any, nvml: Any) -> Any:
    """The NUMA node nearest the GPU (an int; "0-1" when NVML names several), or NotAvailable:
    NVML's memory affinity, else the kernel's numa_node of the PCI device (not
    nvmlDeviceGetNumaNodeId: the GPU memory's own node on Grace Hopper, NotSupported on x86)."""
    mask = nvml_call("nvmlDeviceGetMemoryAffinity", handle, _NODE_WORDS,
                     nvml_const("NVML_AFFINITY_SCOPE_NODE", nvml), nvml=nvml)
    if not isinstance(mask, NotAvailable):
        nodes = cpu_list(mask)  # the node set has the layout of a CPU set
        if nodes:
            return int(nodes) if nodes.isdigit() else nodes
        mask = NotAvailable("nvmlDeviceGetMemoryAffinity gave an empty node set")
    if isinstance(bus_id, NotAvailable):
        return mask
    try:
        sysfs_node = int((SYSFS_PCI_DEVICES / bus_id / "numa_node").read_text())
    except (OSError, ValueError):
        return mask
    return sysfs_node if sysfs_node >= 0 else NotAvailable(
        f"{mask.reason}; the kernel reports no NUMA node for {bus_id}")


def gpu_info(index: int, nvml: Any = None, cuda_properties: list | None = None) -> GpuInfo:
    """Everything about NVML GPU `index`; fields NVML cannot give are NotAvailable."""
    h = device_handle(index, nvml)

    def call(fn_name: str, *args: Any) -> Any:
        return nvml_call(fn_name, h, *args, nvml=nvml)

    sm, mem = nvml_const("NVML_CLOCK_SM", nvml), nvml_const("NVML_CLOCK_MEM", nvml)
    uuid, bus_id = call("nvmlDeviceGetUUID"), pci_bus_id(call("nvmlDeviceGetPciInfo"))
    mig = _enabled(call("nvmlDeviceGetMigMode"), nvml_const("NVML_DEVICE_MIG_ENABLE", nvml))
    props = cuda_device_properties(cuda_properties)
    cuda_index = cuda_ordinal_of(uuid, bus_id, mig_enabled=mig, cuda_properties=props)
    cc = call("nvmlDeviceGetCudaComputeCapability")
    memory = call("nvmlDeviceGetMemoryInfo")
    affinity = call("nvmlDeviceGetCpuAffinity", _AFFINITY_WORDS)
    reasons = throttle_reasons(h, nvml=nvml)
    power_w, power_source = power_reading(h, nvml=nvml)
    links, kinds, remotes = _nvlinks(h, nvml)
    return GpuInfo(
        index=index, cuda_index=cuda_index, name=call("nvmlDeviceGetName"), uuid=uuid,
        pci_bus_id=bus_id,
        compute_capability=cc if isinstance(cc, NotAvailable) else f"{cc[0]}.{cc[1]}",
        sm_count=(NotAvailable(f"SM count comes from torch: {cuda_index.reason}")
                  if isinstance(cuda_index, NotAvailable)
                  else props[cuda_index].multi_processor_count),
        memory_total_bytes=memory if isinstance(memory, NotAvailable) else memory.total,
        memory_free_bytes=memory if isinstance(memory, NotAvailable) else memory.free,
        ecc_enabled=_enabled(call("nvmlDeviceGetEccMode"), nvml_const("NVML_FEATURE_ENABLED",
                                                                       nvml)),
        ecc_errors=_ecc_errors(h, nvml),
        mig_enabled=mig,
        sm_clock_mhz=call("nvmlDeviceGetClockInfo", sm),
        sm_clock_max_mhz=call("nvmlDeviceGetMaxClockInfo", sm),
        mem_clock_mhz=call("nvmlDeviceGetClockInfo", mem),
        mem_clock_max_mhz=call("nvmlDeviceGetMaxClockInfo", mem),
        power_w=power_w, power_source=power_source,
        power_limit_w=milli_to_unit(call("nvmlDeviceGetEnforcedPowerLimit")),
        temperature_c=temperature_c(h, nvml=nvml),
        throttle_reasons=reasons if isinstance(reasons, NotAvailable) else tuple(reasons),
        pcie_gen=call("nvmlDeviceGetCurrPcieLinkGeneration"),
        pcie_gen_max=call("nvmlDeviceGetMaxPcieLinkGeneration"),
        pcie_width=call("nvmlDeviceGetCurrPcieLinkWidth"),
        pcie_width_max=call("nvmlDeviceGetMaxPcieLinkWidth"),
        nvlink_active_links=links, nvlink_remote_types=kinds, nvlink_remote_bus_ids=remotes,
        cpu_affinity=affinity if isinstance(affinity, NotAvailable) else cpu_list(affinity),
        numa_node=_numa_node(h, bus_id, nvml),
    )


def discover_gpus(nvml: Any = None, cuda_properties: list | None = None) -> Any:
    """All GPUs NVML sees, as GpuInfo in NVML order; NotAvailable(reason) when there are none.
    `cuda_properties` (default: torch's) give the SM count, matched by UUID; without NVML the GPUs
    torch sees come in CUDA order, their NVML-only fields NotAvailable."""
    count = device_count(nvml)
    props = cuda_device_properties(cuda_properties)
    if not isinstance(count, NotAvailable):
        return [gpu_info(i, nvml=nvml, cuda_properties=props) for i in range(count)]
    if not props:
        return count
    return [dataclasses.replace(
        gpu_info(i, nvml=nvml, cuda_properties=props), cuda_index=i, name=p.name,
        uuid=str(getattr(p, "uuid", NotAvailable("torch gives no UUID"))),
        compute_capability=f"{p.major}.{p.minor}", sm_count=p.multi_processor_count,
        memory_total_bytes=p.total_memory) for i, p in enumerate(props)]


def topology(gpus: list[GpuInfo], nvml: Any = None) -> Topology:
    """The GPU-GPU link matrix of `nvidia-smi topo -m` for `gpus` (from discover_gpus)."""
    index_of_bus = {g.pci_bus_id: g.index for g in gpus if isinstance(g.pci_bus_id, str)}
    peers, switch_links, unknown_links = [], [], []
    for g in gpus:
        direct: dict[int, int] = {}
        switch = unknown = 0
        for kind, remote in zip(g.nvlink_remote_types, g.nvlink_remote_bus_ids, strict=True):
            peer = index_of_bus.get(remote) if isinstance(remote, str) else None
            if kind == "switch":  # NVSwitch links often have no readable PCI id: trust the type
                switch += 1
            elif kind == "ibmnpu":
                continue  # NVLink to the CPU
            elif peer is not None:  # a GPU of this box (by type, or by bus id alone)
                direct[peer] = direct.get(peer, 0) + 1
            else:
                unknown += 1
        peers.append(direct)
        switch_links.append(switch)
        unknown_links.append(unknown)
    ancestor_class = {nvml_const(name, nvml): cls for name, cls in _ANCESTOR_CLASS.items()}
    handles = [device_handle(g.index, nvml) for g in gpus]

    def link(i: int, j: int) -> str:
        if i == j:
            return "X"
        if peers[i].get(gpus[j].index):
            return f"NV{peers[i][gpus[j].index]}"
        if switch_links[i] and switch_links[j]:  # both on the NVSwitch fabric
            return f"NV{min(switch_links[i], switch_links[j])}"
        level = nvml_call("nvmlDeviceGetTopologyCommonAncestor", handles[i], handles[j], nvml=nvml)
        return ancestor_class.get(level, "n/a")

    order = range(len(gpus))
    return Topology(
        labels=tuple(f"GPU{g.index}" for g in gpus),
        matrix=tuple(tuple(link(i, j) for j in order) for i in order),
        cpu_affinity=tuple(g.cpu_affinity for g in gpus),
        numa_node=tuple(g.numa_node for g in gpus),
        nvlink_peers=tuple(peers), nvswitch_links=tuple(switch_links),
        nvlink_unknown_links=tuple(unknown_links))


def system_info(nvml: Any = None) -> SystemInfo:
    """Driver, CUDA, cuDNN and NCCL versions, and torch's TF32 settings (by either API)."""
    cpu_build = NotAvailable(f"torch {torch.__version__} is a CPU-only build")
    return SystemInfo(
        driver_version=nvml_call("nvmlSystemGetDriverVersion", nvml=nvml),
        cuda_driver_version=cuda_version_string(
            nvml_call("nvmlSystemGetCudaDriverVersion", nvml=nvml)),
        torch_version=torch.__version__,
        torch_cuda_version=torch.version.cuda or cpu_build,
        cudnn_version=torch.backends.cudnn.version() or NotAvailable("torch has no cuDNN"),
        nccl_version=nccl_version() or NotAvailable("this torch build has no NCCL"),
        torch_cuda_usable=True if HAS_CUDA else NotAvailable(why_unavailable("cuda")),
        **tf32_settings(),
    )


def _physical_cores() -> Any:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError as exc:
        return NotAvailable(f"cannot read /proc/cpuinfo: {exc}")
    cores, physical_id = set(), "0"
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "physical id":
            physical_id = value.strip()
        elif key.strip() == "core id":
            cores.add((physical_id, value.strip()))
    return len(cores) or NotAvailable("/proc/cpuinfo lists no core ids")


def cpu_info() -> CpuInfo:
    """CPU model, cores, NUMA nodes, memory, torch threads and torch's CPU ISA level."""
    nodes = len(list(Path("/sys/devices/system/node").glob("node[0-9]*")))
    return CpuInfo(model=cpu_model(), logical_cores=os.cpu_count() or 1,
                   physical_cores=_physical_cores(), numa_nodes=nodes or NotAvailable(
                       "no /sys/devices/system/node (not Linux, or no NUMA)"),
                   memory_total_bytes=read_kib_file("/proc/meminfo").get(
                       "MemTotal", NotAvailable("cannot read MemTotal from /proc/meminfo")),
                   torch_threads=torch.get_num_threads(),
                   isa=torch.backends.cpu.get_cpu_capability())
