"""tests/fake_nvml.py's box plus the NVML counters the health and energy code reads.

    fake = CounterFakeNvml(clock=lambda: t[0])    # the energy counter integrates each GPU's power
    fake.remapped[3] = (2, 1, 1, 0)               # GPU 3: correctable, uncorrectable, pending,
                                                  # failure (nvmlDeviceGetRemappedRows)
    fake.retired[1] = {"sbe": 4, "dbe": 1, "pending": 1}   # only where pages retire (pre-Ampere)
    CounterFakeNvml(model="H200", not_supported={"nvmlDeviceGetTotalEnergyConsumption"})

As on real cards: the total-energy counter is in millijoules since "the driver loaded" (the
fake's construction); A100/A800 and Hopper GPUs remap rows and answer NotSupported for page
retirement, which they replaced (`retirement=True` makes a pre-Ampere-like box that retires
pages and has no row remapper). Signatures and constants match pynvml
(tests/test_health.py checks them).
"""

from __future__ import annotations

from tests.fake_nvml import FakeGpu, FakeNvml, NVMLError_NotSupported


class CounterFakeNvml(FakeNvml):
    """FakeNvml with nvmlDeviceGetTotalEnergyConsumption, row remapping and page retirement."""

    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1

    def __init__(self, *, retirement: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.retirement = retirement
        self.remapped = {gpu.index: (0, 0, 0, 0) for gpu in self.gpus}
        self.retired = {gpu.index: {"sbe": 0, "dbe": 0, "pending": 0} for gpu in self.gpus}
        self.energy_offset_mj = {gpu.index: 0 for gpu in self.gpus}  # e.g. a driver reload

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeGpu) -> int:
        """Millijoules since construction: the integral of the GPU's power history."""
        now, total = handle.clock(), 0.0
        history = handle.power_history
        ends = [t for t, _ in history[1:]] + [now]
        for (t_on, mw), t_off in zip(history, ends, strict=True):
            total += mw * max(0.0, t_off - t_on)  # mW x s = mJ
        return round(total) + self.energy_offset_mj[handle.index]

    def nvmlDeviceGetRemappedRows(self, device: FakeGpu) -> tuple[int, int, int, int]:
        if self.retirement:
            raise NVMLError_NotSupported()
        return self.remapped[device.index]

    def nvmlDeviceGetRetiredPages(self, device: FakeGpu, sourceFilter: int) -> list[int]:
        if not self.retirement:
            raise NVMLError_NotSupported()
        count = self.retired[device.index][
            "dbe" if sourceFilter == self.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
            else "sbe"]
        return [0x1000 * (i + 1) for i in range(count)]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, device: FakeGpu) -> int:
        if not self.retirement:
            raise NVMLError_NotSupported()
        return self.retired[device.index]["pending"]
