"""A fake pynvml replaying an 8-GPU HGX box (A800 by default, or H200), for CPU-only tests.

    from tests.fake_nvml import FakeNvml
    fake = FakeNvml()                         # the default 8x A800-SXM4-80GB box, described below
    report = build_report(nvml=fake, cuda_properties=fake.cuda_properties())
    FakeNvml(model="H200")                    # 8x H200: compute capability 9.0, 18 NVLinks each
    FakeNvml(mig=True)                        # MIG on for every GPU
    FakeNvml(not_supported={"nvmlDeviceGetEccMode"})   # these calls raise NVMLError_NotSupported
    FakeNvml(init_error=FakeNvml.NVMLError_DriverNotLoaded)
    FakeNvml(nvlink="none")                   # PCIe only;  nvlink="nvswitch": all via NVSwitch
    FakeNvml(nvlink="nvswitch", switch_pci="error")  # switch links whose remote PCI info fails
    FakeNvml(clock=lambda: t[0])              # the clock behind Hopper's 1 s power average

It behaves like the real library where NVML consumers can go wrong: the same function names and
parameters and constant values as pynvml (tests/test_fake_nvml.py checks them); NotSupported from
nvmlDeviceGetNumaNodeId, as on x86 hosts (NUMA comes from nvmlDeviceGetMemoryAffinity);
NVML_NVLINK_MAX_LINKS = 36, with InvalidArgument past a GPU's own link count; the remote end of a
link from nvmlDeviceGetNvLinkRemoteDeviceType; NVML_FI_DEV_POWER_INSTANT only on Hopper, where
nvmlDeviceGetPowerUsage is the average of the last second (instantaneous on GA100/A800).

The default box: GPUs 0-3 and 4-7 form two NVLink groups (every pair in a group joined by 4
NVLinks, 12 active links per GPU, nothing across groups); GPUs 0-3 hang off NUMA node 0
(CPUs 0-31,64-95), 4-7 off NUMA node 1 (CPUs 32-63,96-127). PCIe tree (common ancestor, the
`nvidia-smi topo -m` class): 0-1 and 4-5 share one PCIe switch (SINGLE, PIX); 2-3 and 6-7 share
a switch above their own switches (MULTIPLE, PXB); 0-1 and 2-3 sit under different host bridges
of node 0 (NODE); 4-5 and 6-7 under one host bridge of node 1 (HOSTBRIDGE, PHB); across nodes
SYSTEM (SYS). GPU 5 has ECC errors, GPU 2 is throttled (sw_power_cap + hw_thermal_slowdown) and
hot; the others idle. Driver 535.129.03, CUDA driver 12.2 (12020), PCIe gen4 x16.
Telemetry values live in `fake.gpus[i]` (a mutable FakeGpu) so tests can change them over time.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
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
# Per GPU: (host bridge, PCIe switches from the host bridge down to the GPU)
PCIE_PATHS = ((0, ("s0",)), (0, ("s0",)), (1, ("s1", "s1a")), (1, ("s1", "s1b")),
              (2, ("s2",)), (2, ("s2",)), (2, ("s3", "s3a")), (2, ("s3", "s3b")))
MODELS = {
    # name, compute capability, SMs, memory bytes, power limit mW, NVLinks per GPU, NVSwitches
    "A800": ("NVIDIA A800-SXM4-80GB", (8, 0), 108, 85_899_345_920, 400_000, 12, 6),
    "H200": ("NVIDIA H200", (9, 0), 132, 150_754_820_096, 700_000, 18, 4),
}
NVML_NOT_SUPPORTED = 3  # nvmlReturn_t NVML_ERROR_NOT_SUPPORTED


@dataclasses.dataclass
class FakeGpu:
    """One fake GPU's state; tests may change the telemetry fields while sampling."""

    index: int
    bus_id: str
    numa_node: int
    cpu_mask: int
    clock: Callable[[], float] = dataclasses.field(default=time.monotonic, repr=False)
    power_history: list = dataclasses.field(default_factory=list)  # (clock s, mW) per change
    gpu_util_pct: int = 0
    mem_util_pct: int = 0
    mem_used_bytes: int = 4 * 2**20
    sm_clock_mhz: int = 210
    mem_clock_mhz: int = 1593
    power_mw: int = 62_000
    temperature_c: int = 33
    throttle_mask: int = 0x1  # gpu_idle
    ecc_errors: dict = dataclasses.field(default_factory=dict)  # (error_type, counter) -> n
    # per NVLink: (NVML_NVLINK_DEVICE_TYPE_*, remote bus id; None: the remote PCI info fails)
    nvlink_remote: list = dataclasses.field(default_factory=list)

    def __setattr__(self, name: str, value) -> None:
        super().__setattr__(name, value)
        if name == "power_mw":  # remember when power changed, for the 1 s average
            self.power_history.append((self.clock(), value))

    def power_average_mw(self, window_s: float = 1.0) -> int:
        """Mean power over the last `window_s` seconds of the (piecewise constant) history."""
        now = self.clock()
        start = max(now - window_s, self.power_history[0][0])
        if now <= start:
            return self.power_mw
        energy = 0.0
        ends = [t for t, _ in self.power_history[1:]] + [now]
        for (t_on, mw), t_off in zip(self.power_history, ends, strict=True):
            energy += mw * max(0.0, min(t_off, now) - max(t_on, start))
        return round(energy / (now - start))


class FakeNvml:
    """A pynvml-shaped object; pass it as `nvml=` to anything in a800lab.core."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_InvalidArgument = NVMLError_InvalidArgument

    NVML_SUCCESS = 0
    NVML_FEATURE_DISABLED, NVML_FEATURE_ENABLED = 0, 1
    NVML_DEVICE_MIG_DISABLE, NVML_DEVICE_MIG_ENABLE = 0, 1
    NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1, 2
    NVML_TEMPERATURE_GPU = 0
    nvmlTemperature_v1 = 16777228  # sizeof(nvmlTemperature_v1_t) | 1 << 24
    NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
    NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC = 0, 1
    NVML_NVLINK_MAX_LINKS = 36
    NVML_NVLINK_DEVICE_TYPE_GPU, NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0, 1
    NVML_NVLINK_DEVICE_TYPE_SWITCH, NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 2, 255
    NVML_TOPOLOGY_INTERNAL, NVML_TOPOLOGY_SINGLE, NVML_TOPOLOGY_MULTIPLE = 0, 10, 20
    NVML_TOPOLOGY_HOSTBRIDGE, NVML_TOPOLOGY_NODE, NVML_TOPOLOGY_SYSTEM = 30, 40, 50
    NVML_AFFINITY_SCOPE_NODE, NVML_AFFINITY_SCOPE_SOCKET = 0, 1
    NVML_FI_DEV_POWER_INSTANT = 186
    NVML_VALUE_TYPE_DOUBLE, NVML_VALUE_TYPE_UNSIGNED_INT = 0, 1
    NVML_VALUE_TYPE_UNSIGNED_LONG, NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 2, 3
    NVML_VALUE_TYPE_SIGNED_LONG_LONG, NVML_VALUE_TYPE_SIGNED_INT = 4, 5
    NVML_VALUE_TYPE_UNSIGNED_SHORT = 6
    nvmlClocksEventReasonGpuIdle = 0x1
    nvmlClocksEventReasonApplicationsClocksSetting = 0x2
    nvmlClocksEventReasonSwPowerCap = 0x4
    nvmlClocksEventReasonHwSlowdown = 0x8
    nvmlClocksEventReasonSyncBoost = 0x10
    nvmlClocksEventReasonSwThermalSlowdown = 0x20
    nvmlClocksEventReasonHwThermalSlowdown = 0x40
    nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x80
    nvmlClocksEventReasonDisplayClockSetting = 0x100
    # pynvml names these two only with the older "throttle" prefix
    nvmlClocksThrottleReasonBoardLimit = 0x200
    nvmlClocksThrottleReasonReliability = 0x400

    def __init__(self, *, model: str = "A800", mig: bool = False,
                 not_supported: set[str] | frozenset = frozenset(),
                 init_error: type[NVMLError] | None = None, nvlink: str = "groups",
                 switch_pci: str = "readable",
                 clock: Callable[[], float] = time.monotonic) -> None:
        if model not in MODELS:
            raise ValueError(f"model={model!r}: use one of {', '.join(MODELS)}")
        if nvlink not in ("groups", "none", "nvswitch"):
            raise ValueError(f"nvlink={nvlink!r}: use 'groups', 'none' or 'nvswitch'")
        if switch_pci not in ("readable", "empty", "error"):
            raise ValueError(f"switch_pci={switch_pci!r}: use 'readable', 'empty' or 'error'")
        self.model = model
        (self.name, self.capability, self.sm_count, self.memory_total_bytes,
         self.power_limit_mw, self.links_per_gpu, switches) = MODELS[model]
        self.mig = mig
        self.not_supported = set(not_supported)
        self.init_error = init_error
        self.init_count = 0
        self._lock = threading.Lock()
        self.gpus = [FakeGpu(i, BUS_IDS[i], i // 4, MASK_NODE0 if i < 4 else MASK_NODE1,
                             clock=clock) for i in range(8)]
        switch_bus = {"readable": list(SWITCH_BUS_IDS[:switches]), "empty": [""] * switches,
                      "error": [None] * switches}[switch_pci]
        for gpu in self.gpus:
            if nvlink == "groups":  # 4 links to each of the 3 other GPUs of the group
                group = range(gpu.index // 4 * 4, gpu.index // 4 * 4 + 4)
                gpu.nvlink_remote = [(self.NVML_NVLINK_DEVICE_TYPE_GPU, BUS_IDS[peer])
                                     for peer in group if peer != gpu.index for _ in range(4)]
            elif nvlink == "nvswitch":  # the GPU's links spread over the NVSwitches
                gpu.nvlink_remote = [(self.NVML_NVLINK_DEVICE_TYPE_SWITCH,
                                      switch_bus[link % switches])
                                     for link in range(self.links_per_gpu)]
        throttled = self.gpus[2]
        throttled.gpu_util_pct, throttled.mem_util_pct = 100, 61
        throttled.sm_clock_mhz, throttled.power_mw, throttled.temperature_c = 1095, 398_500, 87
        throttled.throttle_mask = 0x4 | 0x40
        self.gpus[5].ecc_errors = {(1, 0): 2, (0, 0): 17, (1, 1): 3, (0, 1): 154}

    @property
    def hopper(self) -> bool:
        return self.capability >= (9, 0)

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

    def nvmlErrorString(self, result: int) -> str:
        return {NVML_NOT_SUPPORTED: "Not Supported"}.get(result, "Unknown Error")

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

    def nvmlDeviceGetName(self, handle: FakeGpu) -> str:
        return self.name

    def nvmlDeviceGetUUID(self, handle: FakeGpu) -> str:
        return f"GPU-{self.model.lower()}fake-0000-0000-0000-00000000000{handle.index}"

    def nvmlDeviceGetPciInfo(self, handle: FakeGpu) -> SimpleNamespace:
        return _pci(handle.bus_id)

    def nvmlDeviceGetCudaComputeCapability(self, handle: FakeGpu) -> tuple[int, int]:
        return self.capability

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu, version: int | None = None
                                ) -> SimpleNamespace:
        total = self.memory_total_bytes
        return SimpleNamespace(total=total, used=handle.mem_used_bytes,
                               free=total - handle.mem_used_bytes)

    def nvmlDeviceGetUtilizationRates(self, handle: FakeGpu) -> SimpleNamespace:
        return SimpleNamespace(gpu=handle.gpu_util_pct, memory=handle.mem_util_pct)

    def nvmlDeviceGetEccMode(self, handle: FakeGpu) -> list[int]:
        return [1, 1]

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeGpu, errorType: int,
                                    counterType: int) -> int:
        return handle.ecc_errors.get((errorType, counterType), 0)

    def nvmlDeviceGetMigMode(self, device: FakeGpu) -> list[int]:
        return [int(self.mig), int(self.mig)]

    def nvmlDeviceGetClockInfo(self, handle: FakeGpu, type: int) -> int:
        return handle.sm_clock_mhz if type == self.NVML_CLOCK_SM else handle.mem_clock_mhz

    def nvmlDeviceGetMaxClockInfo(self, handle: FakeGpu, type: int) -> int:
        max_sm = 1980 if self.hopper else 1410
        return max_sm if type == self.NVML_CLOCK_SM else handle.mem_clock_mhz

    def nvmlDeviceGetPowerUsage(self, handle: FakeGpu) -> int:
        # NVML: a 1 s average on Ampere other than GA100 and newer; instantaneous on GA100
        return handle.power_average_mw() if self.hopper else handle.power_mw

    def nvmlDeviceGetFieldValues(self, handle: FakeGpu, fieldIds: list) -> list:
        return [self._field_value(handle, field_id) for field_id in fieldIds]

    def _field_value(self, handle: FakeGpu, field_id: int) -> SimpleNamespace:
        """One nvmlFieldValue_t: like NVML, an unsupported field fails in its own nvmlReturn."""
        supported = field_id == self.NVML_FI_DEV_POWER_INSTANT and self.hopper
        return SimpleNamespace(
            fieldId=field_id, scopeId=0, timestamp=0, latencyUsec=0,
            valueType=self.NVML_VALUE_TYPE_UNSIGNED_INT,
            nvmlReturn=self.NVML_SUCCESS if supported else NVML_NOT_SUPPORTED,
            value=SimpleNamespace(uiVal=handle.power_mw if supported else 0))

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeGpu) -> int:
        return self.power_limit_mw

    def nvmlDeviceGetTemperatureV(self, handle: FakeGpu, sensor: int,
                                  version: int = nvmlTemperature_v1) -> int:
        return handle.temperature_c

    def nvmlDeviceGetTemperature(self, handle: FakeGpu, sensor: int) -> int:
        return handle.temperature_c

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeGpu) -> int:
        return handle.throttle_mask

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: FakeGpu) -> int:
        return 4

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: FakeGpu) -> int:
        return 4

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: FakeGpu) -> int:
        return 16

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: FakeGpu) -> int:
        return 16

    def _check_link(self, gpu: FakeGpu, link: int) -> None:
        if not gpu.nvlink_remote:
            raise NVMLError_NotSupported()
        if not 0 <= link < self.links_per_gpu:  # past this GPU's links (< NVML_NVLINK_MAX_LINKS)
            raise NVMLError_InvalidArgument()

    def _remote(self, gpu: FakeGpu, link: int) -> tuple:
        self._check_link(gpu, link)
        if link >= len(gpu.nvlink_remote):  # an inactive link leads nowhere
            raise NVMLError_NotSupported()
        return gpu.nvlink_remote[link]

    def nvmlDeviceGetNvLinkState(self, device: FakeGpu, link: int) -> int:
        self._check_link(device, link)
        return self.NVML_FEATURE_ENABLED if link < len(device.nvlink_remote) else \
            self.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: FakeGpu, link: int) -> int:
        return self._remote(handle, link)[0]

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device: FakeGpu, link: int) -> SimpleNamespace:
        bus_id = self._remote(device, link)[1]
        if bus_id is None:
            raise NVMLError_NotSupported()
        return _pci(bus_id)

    def nvmlDeviceGetTopologyCommonAncestor(self, device1: FakeGpu, device2: FakeGpu) -> int:
        if device1.index == device2.index:
            return self.NVML_TOPOLOGY_INTERNAL
        if device1.numa_node != device2.numa_node:
            return self.NVML_TOPOLOGY_SYSTEM
        (bridge1, path1), (bridge2, path2) = PCIE_PATHS[device1.index], PCIE_PATHS[device2.index]
        if bridge1 != bridge2:
            return self.NVML_TOPOLOGY_NODE
        if path1 == path2:
            return self.NVML_TOPOLOGY_SINGLE
        if path1[0] == path2[0]:
            return self.NVML_TOPOLOGY_MULTIPLE
        return self.NVML_TOPOLOGY_HOSTBRIDGE

    def nvmlDeviceGetCpuAffinity(self, handle: FakeGpu, cpuSetSize: int) -> list[int]:
        return _words(handle.cpu_mask, cpuSetSize)

    def nvmlDeviceGetMemoryAffinity(self, handle: FakeGpu, nodeSetSize: int,
                                    scope: int) -> list[int]:
        return _words(1 << handle.numa_node, nodeSetSize)

    def nvmlDeviceGetNumaNodeId(self, handle: FakeGpu) -> int:
        # Only where GPU memory is a NUMA node (e.g. Grace Hopper); an x86 host says this
        raise NVMLError_NotSupported()

    # -- what torch.cuda.get_device_properties would say on this box --------------------------
    def cuda_properties(self) -> list[SimpleNamespace]:
        """Per-GPU torch-like device properties (name, major, minor, multi_processor_count,
        total_memory, uuid without NVML's "GPU-", and torch's PCI domain / bus / device ids)."""
        return [SimpleNamespace(name=self.name, major=self.capability[0],
                                minor=self.capability[1], multi_processor_count=self.sm_count,
                                total_memory=self.memory_total_bytes,
                                uuid=self.nvmlDeviceGetUUID(gpu).removeprefix("GPU-"),
                                pci_domain_id=pci.domain, pci_bus_id=pci.bus,
                                pci_device_id=pci.device)
                for gpu in self.gpus for pci in [_pci(gpu.bus_id)]]


def _words(mask: int, n_words: int) -> list[int]:
    """A bitmask as NVML's array of 64-bit words, lowest bits first."""
    return [(mask >> (64 * word)) & (2**64 - 1) for word in range(n_words)]


def _pci(bus_id: str) -> SimpleNamespace:
    """pynvml's nvmlPciInfo_t fields as the real module returns them (busId is bytes); an empty
    bus id gives the zero-filled struct."""
    if not bus_id:
        return SimpleNamespace(busId=b"", busIdLegacy=b"", domain=0, bus=0, device=0)
    domain, bus, devfn = bus_id.split(":")
    return SimpleNamespace(busId=bus_id.encode(), busIdLegacy=bus_id[4:].encode(),
                           domain=int(domain, 16), bus=int(bus, 16),
                           device=int(devfn.split(".")[0], 16))
