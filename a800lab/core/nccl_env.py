"""The NCCL environment variables worth knowing (read, never set), and the transports NCCL chose
by its NCCL_DEBUG=INFO log ("via P2P/CUMEM", "NET/IB", "NET/Socket"...).

    nccl_settings(); counts = transports_from_log(text); transport_advice(counts)
    settings_that_matter()     # {"NCCL_IB_HCA": "mlx5_0", ...}: every set variable that matters
"""

import os
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class NcclVariable:
    """One variable: its name, a typical setting, and what it is for."""

    name: str
    example: str
    what: str


NCCL_VARIABLES: tuple[NcclVariable, ...] = (
    NcclVariable("NCCL_DEBUG", "INFO", "log what NCCL chose: version, topology, rings/trees "
                 "and the transport of every connection (WARN: problems only)"),
    NcclVariable("NCCL_DEBUG_SUBSYS", "INIT,GRAPH", "limit the log to set-up and topology "
                 "(add ENV to see which NCCL_* settings it read)"),
    NcclVariable("NCCL_DEBUG_FILE", "/tmp/nccl.%h.%p.log", "one log file per host (%h) and "
                 "process (%p) instead of stderr"),
    NcclVariable("NCCL_TOPO_DUMP_FILE", "/tmp/nccl_topo.xml", "write the topology NCCL "
                 "detected (GPUs, NVLinks, PCIe switches, NICs) for comparison across nodes"),
    NcclVariable("NCCL_SOCKET_IFNAME", "eth0", "the network interface for bootstrap and TCP "
                 "traffic (a wrong guess, e.g. docker0, hangs multi-node start-up)"),
    NcclVariable("NCCL_IB_HCA", "mlx5_0,mlx5_1", "the InfiniBand/RoCE adapters to use; pair "
                 "each GPU with the NIC on its PCIe switch"),
    NcclVariable("NCCL_IB_DISABLE", "0", "1 forbids InfiniBand: traffic falls back to TCP "
                 "sockets (slow); leave unset on IB clusters"),
    NcclVariable("NCCL_NET_GDR_LEVEL", "PHB", "how far apart a NIC and a GPU may be for "
                 "GPUDirect RDMA (PIX, PXB, PHB, SYS)"),
    NcclVariable("NCCL_P2P_DISABLE", "0", "1 forbids GPU-to-GPU P2P (NVLink/PCIe) inside a "
                 "node; only for debugging hangs: everything goes through host memory"),
    NcclVariable("NCCL_P2P_LEVEL", "NVL", "the farthest topology class P2P may cross (NVL: "
                 "NVLink only, PIX, PXB, PHB, SYS)"),
    NcclVariable("NCCL_SHM_DISABLE", "0", "1 forbids the shared-memory transport between "
                 "processes of one node"),
    NcclVariable("NCCL_ALGO", "Ring,Tree", "restrict the collective algorithms (for "
                 "experiments; NCCL's own choice is usually best)"),
    NcclVariable("NCCL_PROTO", "Simple", "restrict the protocols (LL, LL128, Simple); for "
                 "experiments and debugging only"),
    NcclVariable("NCCL_NVLS_ENABLE", "1", "NVLink SHARP on NVSwitch systems with it (H100/H200 "
                 "HGX); 0 turns it off"),
    NcclVariable("NCCL_CROSS_NIC", "0", "whether rings may use different NICs on different "
                 "nodes (0: keep each ring on the same rail)"),
    NcclVariable("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1", "PyTorch: abort the process group when "
                 "a collective fails or times out, instead of hanging"),
    NcclVariable("TORCH_NCCL_BLOCKING_WAIT", "0", "PyTorch: make wait() block and raise on "
                 "timeout (debugging)"),
)

# Variables the lab's libraries read (NCCL, gloo, CUDA, OpenMP and MKL, torch, the dynamic loader):
# one set differently on one node of a job changes what that node does (`doctor --fleet`).
MATTERING_PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "GLOO_", "CUDA_", "OMP_",
                      "MKL_", "PYTORCH_", "NVIDIA_", "UCX_")
MATTERING_NAMES = ("LD_PRELOAD", "LD_LIBRARY_PATH")

# "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read"; older NCCL: "Ring 00 : 0[0] -> 1[1] via ..."
_CONNECTION = re.compile(r"NCCL INFO (?:Channel|Ring) \d+(?:/\d+)? : \S+ -> \S+ "
                         r"(?:\[\w+\] )?via (\S+)")


def nccl_settings(environ: Mapping[str, str] | None = None) -> list[dict]:
    """Each of NCCL_VARIABLES with its value in `environ` (default os.environ; None: unset)."""
    environ = os.environ if environ is None else environ
    return [{**asdict(v), "value": environ.get(v.name)} for v in NCCL_VARIABLES]


def settings_that_matter(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of `environ` (default: this process's) the libraries read, by name: what a
    doctor report records so that two machines' settings can be diffed."""
    environ = os.environ if environ is None else environ
    return {name: environ[name] for name in sorted(environ)
            if name.startswith(MATTERING_PREFIXES) or name in MATTERING_NAMES}


def transports_from_log(text: str) -> dict[str, int]:
    """Connections per transport in an NCCL_DEBUG=INFO log, by its first two parts ("P2P/CUMEM",
    "SHM/direct", "NET/IB", "NET/Socket"); GDRDMA is counted apart as "NET/IB+GDRDMA"."""
    counts: Counter[str] = Counter()
    for match in _CONNECTION.finditer(text):
        parts = match.group(1).split("/")
        name = "/".join(parts[:2])
        if name == "NET/IB" and "GDRDMA" in parts:
            name += "+GDRDMA"
        counts[name] += 1
    return dict(counts)


def transport_advice(counts: Mapping[str, int]) -> list[str]:
    """What a transport mix from transports_from_log means, one line per finding."""
    if not counts:
        return ["No connection lines found: run with NCCL_DEBUG=INFO and at least two ranks, "
                "and pass the log of one rank."]
    lines = []
    if any(name.startswith("NET/Socket") for name in counts):
        lines.append("NET/Socket: ranks talk over TCP sockets, far slower than InfiniBand/RoCE; "
                     "check the IB driver and NCCL_IB_HCA, and that NCCL_IB_DISABLE is unset.")
    if "NET/IB" in counts:
        lines.append("NET/IB without GDRDMA: inter-node traffic is staged through host memory; "
                     "GPUDirect RDMA needs the nvidia-peermem module and a NIC close to the GPU "
                     "(NCCL_NET_GDR_LEVEL).")
    if any(name.startswith("SHM") for name in counts):
        lines.append("SHM inside a node: GPU pairs without P2P (no NVLink, or P2P disabled or "
                     "refused across PCIe root complexes) go through host memory.")
    if not lines:
        lines.append("Only P2P and GPUDirect RDMA connections: the fast paths.")
    return lines
