"""The fake NVML against the real pynvml: same parameters, same constants, same refusals."""

import ctypes
import inspect

import pynvml
import pytest

from tests.fake_nvml import FakeNvml


def fake_functions():
    return sorted(name for name, value in vars(FakeNvml).items()
                  if name.startswith("nvml") and callable(value))


def fake_constants():
    return sorted(name for name, value in vars(FakeNvml).items()
                  if name.startswith(("NVML_", "nvml")) and isinstance(value, int))


def test_every_fake_function_takes_the_real_functions_parameters():
    fake = FakeNvml()
    assert len(fake_functions()) >= 30
    for name in fake_functions():
        real = inspect.signature(getattr(pynvml, name))
        mine = inspect.signature(getattr(fake, name))  # bound: `self` is already left out
        assert len(mine.parameters) == len(real.parameters), name
        assert [(p.name, p.default is p.empty) for p in mine.parameters.values()] == \
            [(p.name, p.default is p.empty) for p in real.parameters.values()], name


def test_every_fake_constant_has_the_real_value():
    assert len(fake_constants()) >= 40
    for name in fake_constants():
        assert getattr(FakeNvml, name) == getattr(pynvml, name), name
    assert FakeNvml.NVML_NVLINK_MAX_LINKS == 36
    for name in ("NVMLError_NotSupported", "NVMLError_DriverNotLoaded",
                 "NVMLError_LibraryNotFound", "NVMLError_InvalidArgument"):
        assert issubclass(getattr(pynvml, name), pynvml.NVMLError)
        assert str(getattr(FakeNvml, name)()) == str(getattr(pynvml, name)())


def test_numa_node_id_is_not_supported_as_on_x86():
    fake = FakeNvml()
    with pytest.raises(FakeNvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetNumaNodeId(fake.nvmlDeviceGetHandleByIndex(0))
    gpu4 = fake.nvmlDeviceGetHandleByIndex(4)
    assert fake.nvmlDeviceGetMemoryAffinity(gpu4, 2, FakeNvml.NVML_AFFINITY_SCOPE_NODE) == [2, 0]


def test_links_past_the_gpus_own_count_are_invalid():
    fake = FakeNvml()
    gpu = fake.nvmlDeviceGetHandleByIndex(0)
    assert [fake.nvmlDeviceGetNvLinkState(gpu, link) for link in range(12)] == [1] * 12
    with pytest.raises(FakeNvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetNvLinkState(gpu, 12)
    assert fake.nvmlDeviceGetNvLinkRemoteDeviceType(gpu, 0) == FakeNvml.NVML_NVLINK_DEVICE_TYPE_GPU
    h200 = FakeNvml(model="H200")  # 18 links, 12 of them used by the NVLink groups
    states = [h200.nvmlDeviceGetNvLinkState(h200.gpus[0], link) for link in range(18)]
    assert states == [FakeNvml.NVML_FEATURE_ENABLED] * 12 + [FakeNvml.NVML_FEATURE_DISABLED] * 6
    none = FakeNvml(nvlink="none")
    with pytest.raises(FakeNvml.NVMLError_NotSupported):
        none.nvmlDeviceGetNvLinkState(none.nvmlDeviceGetHandleByIndex(0), 0)


@pytest.mark.parametrize("switch_pci, bus_id", [("readable", b"00000000:C4:00.0"), ("empty", b"")])
def test_switch_links_with_and_without_a_readable_remote_pci_id(switch_pci, bus_id):
    fake = FakeNvml(nvlink="nvswitch", switch_pci=switch_pci)
    gpu = fake.nvmlDeviceGetHandleByIndex(3)
    assert fake.nvmlDeviceGetNvLinkRemoteDeviceType(gpu, 0) == \
        FakeNvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
    assert fake.nvmlDeviceGetNvLinkRemotePciInfo(gpu, 0).busId == bus_id
    failing = FakeNvml(nvlink="nvswitch", switch_pci="error")
    with pytest.raises(FakeNvml.NVMLError_NotSupported):
        failing.nvmlDeviceGetNvLinkRemotePciInfo(failing.nvmlDeviceGetHandleByIndex(3), 0)


def test_common_ancestors_cover_every_pcie_level():
    fake = FakeNvml()
    gpu = fake.nvmlDeviceGetHandleByIndex

    def level(a, b):
        return fake.nvmlDeviceGetTopologyCommonAncestor(gpu(a), gpu(b))

    assert (level(0, 1), level(4, 5)) == (FakeNvml.NVML_TOPOLOGY_SINGLE,) * 2
    assert (level(2, 3), level(6, 7)) == (FakeNvml.NVML_TOPOLOGY_MULTIPLE,) * 2
    assert (level(0, 2), level(1, 3)) == (FakeNvml.NVML_TOPOLOGY_NODE,) * 2
    assert (level(4, 6), level(5, 7)) == (FakeNvml.NVML_TOPOLOGY_HOSTBRIDGE,) * 2
    assert level(0, 4) == FakeNvml.NVML_TOPOLOGY_SYSTEM
    assert level(3, 3) == FakeNvml.NVML_TOPOLOGY_INTERNAL


def test_hopper_power_usage_is_the_last_seconds_average():
    t = [100.0]
    fake = FakeNvml(model="H200", clock=lambda: t[0])
    gpu = fake.gpus[0]                        # 62 W since t = 100 s
    t[0] = 110.0
    gpu.power_mw = 662_000                    # a kernel starts
    t[0] = 110.25
    instant = fake.nvmlDeviceGetFieldValues(gpu, [FakeNvml.NVML_FI_DEV_POWER_INSTANT])[0]
    assert (instant.nvmlReturn, instant.value.uiVal) == (FakeNvml.NVML_SUCCESS, 662_000)
    assert fake.nvmlDeviceGetPowerUsage(gpu) == 212_000  # 0.75 s at 62 W + 0.25 s at 662 W
    t[0] = 112.0
    assert fake.nvmlDeviceGetPowerUsage(gpu) == 662_000


def test_a800_power_usage_is_instantaneous_and_has_no_instant_field():
    fake = FakeNvml()
    gpu = fake.gpus[0]
    gpu.power_mw = 300_000
    assert fake.nvmlDeviceGetPowerUsage(gpu) == 300_000
    [field] = fake.nvmlDeviceGetFieldValues(gpu, [FakeNvml.NVML_FI_DEV_POWER_INSTANT])
    assert fake.nvmlErrorString(field.nvmlReturn) == "Not Supported"


def test_fake_structs_have_the_fields_of_pynvmls_structs():
    fake = FakeNvml(model="H200")
    gpu = fake.gpus[0]

    def fields(struct):
        return {name for name, *_ in struct._fields_}

    assert set(vars(fake.nvmlDeviceGetPciInfo(gpu))) <= fields(pynvml.nvmlPciInfo_t)
    assert set(vars(fake.nvmlDeviceGetMemoryInfo(gpu))) == fields(pynvml.c_nvmlMemory_t)
    assert set(vars(fake.nvmlDeviceGetUtilizationRates(gpu))) == \
        fields(pynvml.c_nvmlUtilization_t)
    [value] = fake.nvmlDeviceGetFieldValues(gpu, [FakeNvml.NVML_FI_DEV_POWER_INSTANT])
    assert set(vars(value)) == fields(pynvml.c_nvmlFieldValue_t)
    assert set(vars(value.value)) <= fields(pynvml.c_nvmlValue_t)


def test_core_reads_pynvmls_own_structs():
    """The code paths that unpack NVML structs, fed the real ctypes structs pynvml returns."""
    from a800lab.core.device import cpu_list
    from a800lab.core.nvml import field_value

    value = pynvml.c_nvmlFieldValue_t()
    value.nvmlReturn, value.valueType = pynvml.NVML_SUCCESS, pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    value.value.uiVal = 412_345

    class RealStructs(FakeNvml):
        def nvmlDeviceGetFieldValues(self, handle, fieldIds):
            return (pynvml.c_nvmlFieldValue_t * 1)(value)

    fake = RealStructs()
    assert field_value(fake.gpus[0], "NVML_FI_DEV_POWER_INSTANT", nvml=fake) == 412_345
    words = (ctypes.c_ulonglong * 4)(0b10, 0, 0, 0)  # what nvmlDeviceGetMemoryAffinity returns
    assert cpu_list(words) == "1"
