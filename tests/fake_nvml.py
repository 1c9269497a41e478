"""A fake pynvml replaying an 8x A800-SXM4-80GB box, for CPU-only tests of NVML consumers.

    from tests.fake_nvml import FakeNvml
    fake = FakeNvml()                         # the default box, described below
    report = build_report(nvml=fake, cuda_properties=fake.cuda_properties())
    FakeNvml(mig=True)                        # MIG on for every GPU
    FakeNvml(not_supported={"nvmlDeviceGetEccMode"})   # these calls raise NVMLError_NotSupported
    FakeNvml(init_error=FakeNvml.NVMLError_DriverNotLoaded)
    FakeNvml(nvlink="none")                   # PCIe only;  nvlink="nvswitch": all via NVSwitch

The default box: GPUs 0-3 and 4-7 form two NVLink groups (every pair in a group joined by 4
NVLinks, 12 active links per GPU, nothing across groups); GPUs 0-3 hang off NUMA node 0
(CPUs 0-31,64-95), 4-7 off NUMA node 1 (CPUs 32-63,96-127). Common PCIe ancestor: MULTIPLE for
pairs sharing a PCIe switch (0-1, 2-3, ...), HOSTBRIDGE for other pairs in a node, SYSTEM across
nodes. GPU 5 has ECC errors, GPU 2 is throttled (sw_power_cap + hw_thermal_slowdown) and hot;
the others idle. Driver 535.129.03, CUDA driver 12.2 (12020), PCIe gen4 x16, 400 W limit.
Telemetry values live in `fake.gpus[i]` (a mutable FakeGpu) so tests can change them over time.
"""

from __future__ import annotations

import dataclasses
import threading
from types import SimpleNamespace


class NVMLError(Exception):
    """Base of the fake NVML errors (like pynvml.NVMLError)."""

    message = "Unknown Error"

    def __str__(self) -> str:
        return self.message


class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's name
    message = "Not Supported"


class NVMLError_DriverNotLoaded(NVMLError):  # noqa: N801
    message = "Driver Not Loaded"


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801
    message = "NVML Shared Library Not Found"


class NVMLError_InvalidArgument(NVMLError):  # noqa: N801
    message = "Invalid Argument"


BUS_IDS = ("00000000:07:00.0", "00000000:0F:00.0", "00000000:47:00.0", "00000000:4E:00.0",
           "00000000:87:00.0", "00000000:90:00.0", "00000000:B7:00.0", "00000000:BD:00.0")
SWITCH_BUS_IDS = tuple(f"00000000:{0xC4 + i:02X}:00.0" for i in range(6))
MASK_NODE0 = (1 << 32) - 1 | ((1 << 32) - 1) << 64     # CPUs 0-31,64-95
MASK_NODE1 = ((1 << 32) - 1) << 32 | ((1 << 32) - 1) << 96   # CPUs 32-63,96-127


@dataclasses.dataclass
class FakeGpu:
    """One fake GPU's state; tests may change the telemetry fields while sampling."""

    index: int
    bus_id: str
    numa_node: int
    cpu_mask: int
    gpu_util_pct: int = 0
    mem_util_pct: int = 0
    mem_used_bytes: int = 4 * 2**20
    sm_clock_mhz: int = 210
    mem_clock_mhz: int = 1593
    power_mw: int = 62_000
    temperature_c: int = 33
    throttle_mask: int = 0x1  # gpu_idle
    ecc_errors: dict = dataclasses.field(default_factory=dict)  # (error_type, counter) -> n
    nvlink_remote: list = dataclasses.field(default_factory=list)  # remote bus id per link


class FakeNvml:
    """A pynvml-shaped object; pass it as `nvml=` to anything in a800lab.core."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_InvalidArgument = NVMLError_InvalidArgument

    NVML_FEATURE_DISABLED, NVML_FEATURE_ENABLED = 0, 1
    NVML_DEVICE_MIG_DISABLE, NVML_DEVICE_MIG_ENABLE = 0, 1
    NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1, 2
    NVML_TEMPERATURE_GPU = 0
    NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
    NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC = 0, 1
    NVML_NVLINK_MAX_LINKS = 18
    NVML_TOPOLOGY_INTERNAL, NVML_TOPOLOGY_SINGLE, NVML_TOPOLOGY_MULTIPLE = 0, 10, 20
    NVML_TOPOLOGY_HOSTBRIDGE, NVML_TOPOLOGY_NODE, NVML_TOPOLOGY_SYSTEM = 30, 40, 50
    nvmlClocksEventReasonGpuIdle = 0x1
    nvmlClocksEventReasonApplicationsClocksSetting = 0x2
    nvmlClocksEventReasonSwPowerCap = 0x4
    nvmlClocksEventReasonHwSlowdown = 0x8
    nvmlClocksEventReasonSyncBoost = 0x10
    nvmlClocksEventReasonSwThermalSlowdown = 0x20
    nvmlClocksEventReasonHwThermalSlowdown = 0x40
    nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x80
    nvmlClocksEventReasonDisplayClockSetting = 0x100

    def __init__(self, *, mig: bool = False, not_supported: set[str] | frozenset = frozenset(),
                 init_error: type[NVMLError] | None = None, nvlink: str = "groups") -> None:
        if nvlink not in ("groups", "none", "nvswitch"):
            raise ValueError(f"nvlink={nvlink!r}: use 'groups', 'none' or 'nvswitch'")
        self.mig = mig
        self.not_supported = set(not_supported)
        self.init_error = init_error
        self.init_count = 0
        self._lock = threading.Lock()
        self.gpus = [FakeGpu(i, BUS_IDS[i], i // 4, MASK_NODE0 if i < 4 else MASK_NODE1)
                     for i in range(8)]
        for gpu in self.gpus:
            if nvlink == "groups":  # 4 links to each of the 3 other GPUs of the group
                group = range(gpu.index // 4 * 4, gpu.index // 4 * 4 + 4)
                gpu.nvlink_remote = [BUS_IDS[peer] for peer in group if peer != gpu.index
                                     for _ in range(4)]
            elif nvlink == "nvswitch":  # 12 links spread over the 6 NVSwitches
                gpu.nvlink_remote = [SWITCH_BUS_IDS[link % 6] for link in range(12)]
        throttled = self.gpus[2]
        throttled.gpu_util_pct, throttled.mem_util_pct = 100, 61
        throttled.sm_clock_mhz, throttled.power_mw, throttled.temperature_c = 1095, 398_500, 87
        throttled.throttle_mask = 0x4 | 0x40
        self.gpus[5].ecc_errors = {(1, 0): 2, (0, 0): 17, (1, 1): 3, (0, 1): 154}

    # -- the pynvml surface -------------------------------------------------------------------
    def __getattribute__(self, name: str):
        if name.startswith("nvml") and name in object.__getattribute__(self, "not_supported"):
            def not_supported(*args):
                raise NVMLError_NotSupported()
            return not_supported
        return object.__getattribute__(self, name)

    def nvmlInit(self) -> None:
        with self._lock:
            self.init_count += 1
        if self.init_error is not None:
            raise self.init_error()

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return "535.129.03"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12020

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        if not 0 <= index < len(self.gpus):
            raise NVMLError_InvalidArgument()
        return self.gpus[index]

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> str:
        return "NVIDIA A800-SXM4-80GB"

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> str:
        return f"GPU-a800fake-0000-0000-0000-00000000000{gpu.index}"

    def nvmlDeviceGetPciInfo(self, gpu: FakeGpu) -> SimpleNamespace:
        return _pci(gpu.bus_id)

    def nvmlDeviceGetCudaComputeCapability(self, gpu: FakeGpu) -> tuple[int, int]:
        return (8, 0)

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu) -> SimpleNamespace:
        total = 85_899_345_920  # 80 GiB
        return SimpleNamespace(total=total, used=gpu.mem_used_bytes,
                               free=total - gpu.mem_used_bytes)

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu) -> SimpleNamespace:
        return SimpleNamespace(gpu=gpu.gpu_util_pct, memory=gpu.mem_util_pct)

    def nvmlDeviceGetEccMode(self, gpu: FakeGpu) -> list[int]:
        return [1, 1]

    def nvmlDeviceGetTotalEccErrors(self, gpu: FakeGpu, error_type: int, counter: int) -> int:
        return gpu.ecc_errors.get((error_type, counter), 0)

    def nvmlDeviceGetMigMode(self, gpu: FakeGpu) -> list[int]:
        return [int(self.mig), int(self.mig)]

    def nvmlDeviceGetClockInfo(self, gpu: FakeGpu, clock: int) -> int:
        return gpu.sm_clock_mhz if clock == self.NVML_CLOCK_SM else gpu.mem_clock_mhz

    def nvmlDeviceGetMaxClockInfo(self, gpu: FakeGpu, clock: int) -> int:
        return 1410 if clock == self.NVML_CLOCK_SM else 1593

    def nvmlDeviceGetPowerUsage(self, gpu: FakeGpu) -> int:
        return gpu.power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, gpu: FakeGpu) -> int:
        return 400_000

    def nvmlDeviceGetTemperature(self, gpu: FakeGpu, sensor: int) -> int:
        return gpu.temperature_c

    def nvmlDeviceGetCurrentClocksEventReasons(self, gpu: FakeGpu) -> int:
        return gpu.throttle_mask

    def nvmlDeviceGetCurrPcieLinkGeneration(self, gpu: FakeGpu) -> int:
        return 4

    def nvmlDeviceGetMaxPcieLinkGeneration(self, gpu: FakeGpu) -> int:
        return 4

    def nvmlDeviceGetCurrPcieLinkWidth(self, gpu: FakeGpu) -> int:
        return 16

    def nvmlDeviceGetMaxPcieLinkWidth(self, gpu: FakeGpu) -> int:
        return 16

    def nvmlDeviceGetNvLinkState(self, gpu: FakeGpu, link: int) -> int:
        if not gpu.nvlink_remote:
            raise NVMLError_NotSupported()
        if not 0 <= link < self.NVML_NVLINK_MAX_LINKS:
            raise NVMLError_InvalidArgument()
        return int(link < len(gpu.nvlink_remote))

    def nvmlDeviceGetNvLinkRemotePciInfo(self, gpu: FakeGpu, link: int) -> SimpleNamespace:
        if link >= len(gpu.nvlink_remote):
            raise NVMLError_InvalidArgument()
        return _pci(gpu.nvlink_remote[link])

    def nvmlDeviceGetTopologyCommonAncestor(self, gpu1: FakeGpu, gpu2: FakeGpu) -> int:
        if gpu1.index == gpu2.index:
            return self.NVML_TOPOLOGY_INTERNAL
        if gpu1.numa_node != gpu2.numa_node:
            return self.NVML_TOPOLOGY_SYSTEM
        if gpu1.index // 2 == gpu2.index // 2:
            return self.NVML_TOPOLOGY_MULTIPLE
        return self.NVML_TOPOLOGY_HOSTBRIDGE

    def nvmlDeviceGetCpuAffinity(self, gpu: FakeGpu, n_words: int) -> list[int]:
        return [(gpu.cpu_mask >> (64 * word)) & (2**64 - 1) for word in range(n_words)]

    def nvmlDeviceGetNumaNodeId(self, gpu: FakeGpu) -> int:
        return gpu.numa_node

    # -- what torch.cuda.get_device_properties would say on this box --------------------------
    def cuda_properties(self) -> list[SimpleNamespace]:
        """Per-GPU torch-like device properties (name, major, minor, multi_processor_count,
        total_memory, uuid without NVML's "GPU-", and torch's PCI domain / bus / device ids)."""
        return [SimpleNamespace(name="NVIDIA A800-SXM4-80GB", major=8, minor=0,
                                multi_processor_count=108, total_memory=85_899_345_920,
                                uuid=f"a800fake-0000-0000-0000-00000000000{gpu.index}",
                                pci_domain_id=pci.domain, pci_bus_id=pci.bus,
                                pci_device_id=pci.device)
                for gpu in self.gpus for pci in [_pci(gpu.bus_id)]]


def _pci(bus_id: str) -> SimpleNamespace:
    """pynvml's nvmlPciInfo_t fields as the real module returns them (busId is bytes)."""
    domain, bus, devfn = bus_id.split(":")
    return SimpleNamespace(busId=bus_id.encode(), busIdLegacy=bus_id[4:].encode(),
                           domain=int(domain, 16), bus=int(bus, 16),
                           device=int(devfn.split(".")[0], 16))
