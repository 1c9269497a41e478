"""The CUDA <-> NVML mapping on the fake 8x A800 box, with faked CUDA_VISIBLE_DEVICES lists."""

from types import SimpleNamespace

import pytest
import torch

from a800lab.core.doctor import build_report
from a800lab.core.gpu_map import (
    cuda_ordinal,
    normalise_bus_id,
    nvml_index,
    pci_bus_id,
)
from a800lab.core.nvml import NotAvailable
from tests.fake_nvml import FakeNvml


def visible(fake, *nvml_indices):
    """torch's device properties as under CUDA_VISIBLE_DEVICES=<nvml_indices>."""
    props = fake.cuda_properties()
    return [props[i] for i in nvml_indices]


def test_all_gpus_visible_map_one_to_one():
    fake = FakeNvml()
    props = fake.cuda_properties()
    assert [nvml_index(f"cuda:{i}", nvml=fake, cuda_properties=props) for i in range(8)] == \
        list(range(8))
    assert [cuda_ordinal(i, nvml=fake, cuda_properties=props) for i in range(8)] == list(range(8))
    assert nvml_index(5, nvml=fake, cuda_properties=props) == 5
    assert nvml_index(torch.device("cuda:6"), nvml=fake, cuda_properties=props) == 6
    assert nvml_index("cuda", nvml=fake, cuda_properties=props) == 0  # no CUDA: device 0


def test_cuda_visible_devices_3_puts_cuda_0_on_nvml_gpu_3(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    fake = FakeNvml()
    props = visible(fake, 3)
    assert nvml_index("cuda:0", nvml=fake, cuda_properties=props) == 3
    assert nvml_index("cuda", nvml=fake, cuda_properties=props) == 3
    missing = nvml_index("cuda:1", nvml=fake, cuda_properties=props)
    assert isinstance(missing, NotAvailable)
    assert missing.reason == "there is no cuda:1: torch sees 1 CUDA device(s)"
    assert cuda_ordinal(3, nvml=fake, cuda_properties=props) == 0
    hidden = cuda_ordinal(0, nvml=fake, cuda_properties=props)
    assert isinstance(hidden, NotAvailable) and "CUDA_VISIBLE_DEVICES=3" in hidden.reason


def test_reordered_visible_devices():
    fake = FakeNvml()
    props = visible(fake, 7, 3)  # CUDA_VISIBLE_DEVICES=7,3
    assert [nvml_index(i, nvml=fake, cuda_properties=props) for i in (0, 1)] == [7, 3]
    assert [cuda_ordinal(i, nvml=fake, cuda_properties=props) for i in (7, 3)] == [0, 1]


def test_matches_by_pci_bus_id_when_torch_gives_no_uuid():
    fake = FakeNvml()
    props = visible(fake, 6)
    props[0].uuid = ""
    assert nvml_index("cuda:0", nvml=fake, cuda_properties=props) == 6
    assert cuda_ordinal(6, nvml=fake, cuda_properties=props) == 0
    del props[0].pci_bus_id  # neither UUID nor bus id: no guess
    result = nvml_index("cuda:0", nvml=fake, cuda_properties=props)
    assert isinstance(result, NotAvailable) and "no NVML GPU has the UUID" in result.reason


def test_a_mig_slice_is_not_mapped_to_its_whole_gpu():
    fake = FakeNvml(mig=True)
    slice_props = visible(fake, 2)
    slice_props[0].uuid = "MIG-5c7d1f5e-0000-0000-0000-000000000002"  # its own UUID
    result = nvml_index("cuda:0", nvml=fake, cuda_properties=slice_props)
    assert isinstance(result, NotAvailable)
    assert "MIG slice of NVML GPU 2" in result.reason
    whole = cuda_ordinal(2, nvml=fake, cuda_properties=slice_props)
    assert isinstance(whole, NotAvailable) and "MIG is on" in whole.reason


def test_without_nvml_or_cuda_says_why():
    no_driver = FakeNvml(init_error=FakeNvml.NVMLError_DriverNotLoaded)
    result = nvml_index("cuda:0", nvml=no_driver, cuda_properties=no_driver.cuda_properties())
    assert isinstance(result, NotAvailable) and "Driver Not Loaded" in result.reason
    fake = FakeNvml()
    result = nvml_index("cuda:0", nvml=fake, cuda_properties=[])
    assert isinstance(result, NotAvailable) and "torch sees no CUDA device" in result.reason
    result = cuda_ordinal(0, nvml=fake, cuda_properties=[])
    assert isinstance(result, NotAvailable) and "torch sees no CUDA device" in result.reason
    assert isinstance(cuda_ordinal(12, nvml=fake, cuda_properties=[]), NotAvailable)


@pytest.mark.parametrize("bad", ["cpu", "cuda:x", "gpu0", -1, True, 1.0, None])
def test_anything_but_a_cuda_device_is_refused(bad):
    with pytest.raises(ValueError, match="'cuda:N'"):
        nvml_index(bad, nvml=FakeNvml(), cuda_properties=[])


def test_doctor_reports_each_gpus_cuda_ordinal(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    fake = FakeNvml()
    report = build_report(nvml=fake, cuda_properties=visible(fake, 3))
    assert report["gpus"][3]["cuda_index"] == 0 and report["gpus"][3]["sm_count"] == 108
    hidden = report["gpus"][0]["cuda_index"]
    assert hidden["available"] is False and "CUDA_VISIBLE_DEVICES=3" in hidden["reason"]
    assert "SM count comes from torch" in report["gpus"][0]["sm_count"]["reason"]


def test_normalise_bus_id():
    assert normalise_bus_id("00000000:4E:00.0") == "0000:4e:00.0"
    assert normalise_bus_id(b"0000:4e:00.0") == "0000:4e:00.0"
    assert normalise_bus_id("00000001:07:00.0") == "0001:07:00.0"
    for bad in ("", b"", "garbage", "0000:zz:00.0", "0000:07"):
        with pytest.raises(ValueError, match="not a PCI bus id"):
            normalise_bus_id(bad)


def test_a_bad_bus_id_is_not_available_not_an_exception():
    assert pci_bus_id(SimpleNamespace(busId=b"00000000:07:00.0")) == "0000:07:00.0"
    assert pci_bus_id(SimpleNamespace(busId=b"", busIdLegacy=b"0000:0F:00.0")) == "0000:0f:00.0"
    empty = pci_bus_id(SimpleNamespace(busId=b"", busIdLegacy=b""))
    assert isinstance(empty, NotAvailable) and "no usable PCI bus id" in empty.reason
