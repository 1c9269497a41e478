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
    field_value,
    is_not_available,
    nvml_call,
    nvml_const,
    power_reading,
    temperature_c,
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


@pytest.mark.parametrize("module", [pynvml, FakeNvml()], ids=["pynvml", "fake"])
def test_board_limit_and_reliability_bits_are_throttling(module):
    # pynvml names 0x200 and 0x400 only nvmlClocksThrottleReasonBoardLimit / ...Reliability
    assert decode_throttle_reasons(0x200, nvml=module) == ["board_limit"]
    assert decode_throttle_reasons(0x400 | 0x1, nvml=module) == ["gpu_idle", "reliability"]
    assert decode_throttle_reasons(0x7FF, nvml=module)[-2:] == ["board_limit", "reliability"]


def test_temperature_falls_back_to_the_deprecated_call():
    fake = FakeNvml(not_supported={"nvmlDeviceGetTemperatureV"})
    assert temperature_c(device_handle(2, fake), nvml=fake) == 87
    neither = FakeNvml(not_supported={"nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"})
    assert temperature_c(device_handle(2, neither), nvml=neither) == NotAvailable(
        "nvmlDeviceGetTemperatureV: Not Supported")

    class OnlyV(FakeNvml):
        def nvmlDeviceGetTemperature(self, handle, sensor):
            raise AssertionError("deprecated; not to be called when the V call works")

    fake = OnlyV()
    assert temperature_c(device_handle(2, fake), nvml=fake) == 87


def test_power_reading_names_its_source():
    t = [0.0]
    h200 = FakeNvml(model="H200", clock=lambda: t[0])  # 62 W from t = 0
    older_driver = FakeNvml(model="H200", clock=lambda: t[0],
                            not_supported={"nvmlDeviceGetFieldValues"})
    t[0] = 5.0
    h200.gpus[0].power_mw = older_driver.gpus[0].power_mw = 500_000
    t[0] = 5.25  # the last second: 0.75 s at 62 W, 0.25 s at 500 W
    assert power_reading(device_handle(0, h200), nvml=h200) == (500.0, "instant")
    assert power_reading(device_handle(0, older_driver), nvml=older_driver) == (
        171.5, "average_1s")
    a800 = FakeNvml()  # no instant field; PowerUsage is instantaneous on GA100
    assert power_reading(device_handle(2, a800), nvml=a800) == (398.5, "power_usage")
    blind = FakeNvml(not_supported={"nvmlDeviceGetPowerUsage"})
    watts, source = power_reading(device_handle(0, blind), nvml=blind)
    assert watts == source == NotAvailable("nvmlDeviceGetPowerUsage: Not Supported")


def test_field_value_reads_the_member_its_type_names():
    class Fields(FakeNvml):
        def nvmlDeviceGetFieldValues(self, handle, fieldIds):
            return [SimpleNamespace(fieldId=fieldIds[0], nvmlReturn=self.NVML_SUCCESS,
                                    valueType=self.NVML_VALUE_TYPE_DOUBLE,
                                    value=SimpleNamespace(dVal=2.5, uiVal=7))]

    fake = Fields()
    assert field_value(device_handle(0, fake), "NVML_FI_DEV_POWER_INSTANT", nvml=fake) == 2.5
    a800 = FakeNvml()
    assert field_value(device_handle(0, a800), "NVML_FI_DEV_POWER_INSTANT", nvml=a800) == \
        NotAvailable("NVML_FI_DEV_POWER_INSTANT: Not Supported")


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
        # the fake spells each reason the way pynvml's newest name does
        newest = "nvmlClocksEventReason" if hasattr(pynvml, "nvmlClocksEventReason" + suffix) \
            else "nvmlClocksThrottleReason"
        assert hasattr(FakeNvml, newest + suffix)
    assert not [n for n in names if not hasattr(pynvml, n)]
    # The fake leaves out only the pre-rename throttle function (tested above).
    assert [n for n in names if not hasattr(FakeNvml, n)] == [
        "nvmlDeviceGetCurrentClocksThrottleReasons"]
