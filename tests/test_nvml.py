"""The NVML wrapper: failures become NotAvailable values, init runs once, names match pynvml."""

import re
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest

from a800lab.core import nvml as nvml_mod
from a800lab.core.backends import HAS_NVML
from a800lab.core.nvml import (
    NotAvailable,
    cuda_version_string,
    decode_throttle_reasons,
    device_handle,
    ensure_init,
    is_not_available,
    nvml_call,
    nvml_const,
    throttle_reasons,
    to_jsonable,
)
from tests.fake_nvml import FakeNvml

CORE = Path(__file__).resolve().parents[1] / "a800lab" / "core"


def test_not_available_is_falsy_and_serialises():
    na = NotAvailable("nvmlDeviceGetEccMode: Not Supported")
    assert not na
    assert repr(na) == "n/a (nvmlDeviceGetEccMode: Not Supported)"
    assert na.to_dict() == {"available": False, "reason": "nvmlDeviceGetEccMode: Not Supported"}
    assert is_not_available(na) and is_not_available(na.to_dict())
    assert not is_not_available({"available": False}) and not is_not_available(0)


def test_to_jsonable_recurses():
    value = {"a": (1, NotAvailable("x")), 2: [b"bus"], "n": None}
    assert to_jsonable(value) == {"a": [1, {"available": False, "reason": "x"}], "2": ["bus"],
                                  "n": None}


def test_calls_return_values_from_the_fake():
    fake = FakeNvml()
    assert nvml_call("nvmlSystemGetDriverVersion", nvml=fake) == "535.129.03"
    h = device_handle(2, fake)
    assert nvml_call("nvmlDeviceGetPowerUsage", h, nvml=fake) == 398_500
    assert nvml_call("nvmlDeviceGetTemperature", h, nvml_const("NVML_TEMPERATURE_GPU", fake),
                     nvml=fake) == 87


def test_bytes_results_are_decoded():
    module = SimpleNamespace(NVMLError=RuntimeError, nvmlInit=lambda: None,
                             nvmlSystemGetDriverVersion=lambda: b"550.54.15")
    assert nvml_call("nvmlSystemGetDriverVersion", nvml=module) == "550.54.15"


def test_not_supported_becomes_not_available_with_reason():
    fake = FakeNvml(not_supported={"nvmlDeviceGetEccMode"})
    result = nvml_call("nvmlDeviceGetEccMode", device_handle(0, fake), nvml=fake)
    assert isinstance(result, NotAvailable)
    assert result.reason == "nvmlDeviceGetEccMode: Not Supported"


def test_invalid_index_and_missing_function_are_not_available():
    fake = FakeNvml()
    assert "Invalid Argument" in device_handle(99, fake).reason
    missing = nvml_call("nvmlDeviceGetSomethingNew", nvml=fake)
    assert isinstance(missing, NotAvailable) and "pip install -U nvidia-ml-py" in missing.reason
    assert isinstance(nvml_const("NVML_NO_SUCH_CONSTANT", fake), NotAvailable)


def test_not_available_argument_short_circuits():
    fake = FakeNvml()
    bad_handle = device_handle(99, fake)
    assert nvml_call("nvmlDeviceGetName", bad_handle, nvml=fake) is bad_handle


def test_init_runs_once_across_threads():
    fake = FakeNvml()
    threads = [threading.Thread(target=nvml_call, args=("nvmlDeviceGetCount",),
                                kwargs={"nvml": fake}) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert fake.init_count == 1
    assert ensure_init(fake) is fake


def test_no_driver_is_not_available_and_remembered():
    fake = FakeNvml(init_error=FakeNvml.NVMLError_DriverNotLoaded)
    first = nvml_call("nvmlDeviceGetCount", nvml=fake)
    second = nvml_call("nvmlSystemGetDriverVersion", nvml=fake)
    assert isinstance(first, NotAvailable) and first == second
    assert "no NVIDIA driver" in first.reason and "Driver Not Loaded" in first.reason
    assert fake.init_count == 1


def test_no_library_is_not_available(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    monkeypatch.setattr(nvml_mod, "_real_module", None)
    result = nvml_call("nvmlDeviceGetCount")
    assert isinstance(result, NotAvailable)
    assert "no NVML library" in result.reason and "nvidia-ml-py" in result.reason
    assert isinstance(nvml_const("NVML_CLOCK_SM"), NotAvailable)


@pytest.mark.skipif(HAS_NVML, reason="this machine has a working NVIDIA driver")
def test_real_module_without_driver_gives_not_available():
    result = nvml_call("nvmlDeviceGetCount")
    assert isinstance(result, NotAvailable) and "nvmlInit failed" in result.reason


def test_decode_throttle_reasons_with_fake_and_real_constants():
    mask = 0x1 | 0x4 | 0x40
    expected = ["gpu_idle", "sw_power_cap", "hw_thermal_slowdown"]
    assert decode_throttle_reasons(mask, nvml=FakeNvml()) == expected
    assert decode_throttle_reasons(mask, nvml=pynvml) == expected
    assert decode_throttle_reasons(0x8 | 0x80 | 0x20 | 0x10 | 0x2, nvml=pynvml) == [
        "applications_clocks_setting", "hw_slowdown", "sync_boost", "sw_thermal_slowdown",
        "hw_power_brake"]
    assert decode_throttle_reasons(0, nvml=pynvml) == []


def test_throttle_reasons_fall_back_to_the_older_function():
    class OlderDriver(FakeNvml):
        def nvmlDeviceGetCurrentClocksThrottleReasons(self, gpu):
            return 0x20

    fake = OlderDriver(not_supported={"nvmlDeviceGetCurrentClocksEventReasons"})
    assert throttle_reasons(device_handle(0, fake), nvml=fake) == ["sw_thermal_slowdown"]
    neither = FakeNvml(not_supported={"nvmlDeviceGetCurrentClocksEventReasons"})
    result = throttle_reasons(device_handle(0, neither), nvml=neither)
    assert result == NotAvailable("nvmlDeviceGetCurrentClocksEventReasons: Not Supported")


def test_cuda_version_string():
    assert cuda_version_string(12020) == "12.2"
    assert cuda_version_string(11080) == "11.8"
    assert isinstance(cuda_version_string(NotAvailable("x")), NotAvailable)


def test_every_nvml_name_in_core_exists_in_pynvml_and_the_fake():
    names = set()
    for path in CORE.glob("*.py"):
        names |= set(re.findall(r'"((?:nvml|NVML_)[A-Za-z_]+)"', path.read_text()))
    names |= {"NVML_TOPOLOGY_" + level for level in
              ("INTERNAL", "SINGLE", "MULTIPLE", "HOSTBRIDGE", "NODE", "SYSTEM")}
    names |= {"NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
              "NVML_VOLATILE_ECC", "NVML_AGGREGATE_ECC"}
    assert "nvmlDeviceGetNvLinkRemotePciInfo" in names  # the scan found the device module
    prefixes = {"nvmlClocksEventReason", "nvmlClocksThrottleReason"}  # + suffix in nvml.py
    assert prefixes <= names
    names -= prefixes
    for _, suffix in nvml_mod._THROTTLE_REASONS:
        assert hasattr(pynvml, "nvmlClocksThrottleReason" + suffix)
        assert hasattr(FakeNvml, "nvmlClocksEventReason" + suffix)
    assert not [n for n in names if not hasattr(pynvml, n)]
    # The fake leaves out only the pre-rename throttle function (tested above).
    assert [n for n in names if not hasattr(FakeNvml, n)] == [
        "nvmlDeviceGetCurrentClocksThrottleReasons"]
