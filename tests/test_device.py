"""Device discovery and topology on the fake 8x A800 box, plus the real CPU of this machine."""

import json
from types import SimpleNamespace

import pytest

from a800lab.core import device as device_mod
from a800lab.core.backends import HAS_CUDA, HAS_NVML
from a800lab.core.device import (
    cpu_info,
    cpu_list,
    discover_gpus,
    system_info,
    topology,
)
from a800lab.core.nvml import NotAvailable
from tests.fake_nvml import FakeNvml


def fake_gpus(**variant):
    fake = FakeNvml(**variant)
    return fake, discover_gpus(nvml=fake, cuda_properties=fake.cuda_properties())


def test_discovers_eight_a800s_with_their_properties():
    _, gpus = fake_gpus()
    assert [g.index for g in gpus] == list(range(8))
    g = gpus[0]
    assert g.name == "NVIDIA A800-SXM4-80GB" and g.compute_capability == "8.0"
    assert g.sm_count == 108 and g.memory_total_bytes == 80 * 2**30
    assert g.uuid == "GPU-a800fake-0000-0000-0000-000000000000"
    assert g.pci_bus_id == "0000:07:00.0"
    assert (g.sm_clock_max_mhz, g.mem_clock_max_mhz, g.power_limit_w) == (1410, 1593, 400.0)
    assert (g.power_w, g.power_source, g.temperature_c) == (62.0, "power_usage", 33)
    assert (g.pcie_gen, g.pcie_width, g.pcie_gen_max, g.pcie_width_max) == (4, 16, 4, 16)
    assert g.ecc_enabled is True and g.mig_enabled is False
    assert g.throttle_reasons == ("gpu_idle",)
    assert g.nvlink_active_links == 12


def test_throttled_gpu_and_ecc_errors_are_reported():
    _, gpus = fake_gpus()
    hot = gpus[2]
    assert hot.throttle_reasons == ("sw_power_cap", "hw_thermal_slowdown")
    assert (hot.sm_clock_mhz, hot.power_w, hot.temperature_c) == (1095, 398.5, 87)
    assert gpus[5].ecc_errors == {"volatile_corrected": 17, "volatile_uncorrected": 2,
                                  "aggregate_corrected": 154, "aggregate_uncorrected": 3}
    assert set(gpus[4].ecc_errors.values()) == {0}


def test_affinity_and_numa_nodes():
    _, gpus = fake_gpus()
    assert [g.numa_node for g in gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert {g.cpu_affinity for g in gpus[:4]} == {"0-31,64-95"}
    assert {g.cpu_affinity for g in gpus[4:]} == {"32-63,96-127"}


def test_topology_matrix_two_nvlink_groups():
    fake, gpus = fake_gpus()
    topo = topology(gpus, nvml=fake)
    assert topo.labels == tuple(f"GPU{i}" for i in range(8))
    m = topo.matrix
    assert all(m[i][i] == "X" for i in range(8))
    for i in range(8):
        for j in range(8):
            if i != j:
                assert m[i][j] == ("NV4" if i // 4 == j // 4 else "SYS"), (i, j)
    assert topo.nvlink_peers[0] == {1: 4, 2: 4, 3: 4}
    assert topo.nvlink_peers[5] == {4: 4, 6: 4, 7: 4}
    assert topo.nvswitch_links == (0,) * 8
    assert topo.numa_node == (0, 0, 0, 0, 1, 1, 1, 1)
    assert topo.cpu_affinity[7] == "32-63,96-127"
    assert set(topo.legend) >= {"X", "NV#", "PIX", "PXB", "PHB", "NODE", "SYS"}


def test_topology_without_nvlink_uses_pcie_ancestors():
    fake, gpus = fake_gpus(nvlink="none")
    assert all(isinstance(g.nvlink_active_links, NotAvailable) for g in gpus)
    m = topology(gpus, nvml=fake).matrix
    assert m[0][1] == "PIX" and m[4][5] == "PIX"   # SINGLE: one PCIe switch between them
    assert m[2][3] == "PXB" and m[6][7] == "PXB"   # MULTIPLE: switches, no host bridge
    assert m[4][6] == "PHB" and m[5][7] == "PHB"   # HOSTBRIDGE: through one host bridge
    assert m[0][2] == "NODE" and m[1][3] == "NODE"  # NODE: two host bridges of one NUMA node
    assert m[0][4] == "SYS" and m[3][7] == "SYS"   # SYSTEM: across NUMA nodes
    assert all(m[i][j] == m[j][i] for i in range(8) for j in range(8))


@pytest.mark.parametrize("switch_pci", ["readable", "empty", "error"])
def test_topology_through_nvswitch(switch_pci):
    fake, gpus = fake_gpus(nvlink="nvswitch", switch_pci=switch_pci)
    assert gpus[0].nvlink_remote_types == ("switch",) * 12
    topo = topology(gpus, nvml=fake)
    assert topo.nvswitch_links == (12,) * 8 and topo.nvlink_peers[0] == {}
    assert topo.nvlink_unknown_links == (0,) * 8
    assert {topo.matrix[i][j] for i in range(8) for j in range(8) if i != j} == {"NV12"}
    if switch_pci != "readable":  # the switch's bus id is not available, only for that field
        assert all(isinstance(bus, NotAvailable) for bus in gpus[0].nvlink_remote_bus_ids)
    json.dumps(gpus[0].to_dict())


def test_h200_box_through_nvswitch():
    fake, gpus = fake_gpus(model="H200", nvlink="nvswitch", switch_pci="error")
    assert gpus[0].name == "NVIDIA H200" and gpus[0].nvlink_active_links == 18
    assert (gpus[0].power_w, gpus[0].power_source) == (62.0, "instant")
    assert topology(gpus, nvml=fake).matrix[0][7] == "NV18"


def test_links_found_by_bus_id_when_the_driver_gives_no_remote_type():
    fake, gpus = fake_gpus(not_supported={"nvmlDeviceGetNvLinkRemoteDeviceType"})
    assert isinstance(gpus[0].nvlink_remote_types[0], NotAvailable)
    topo = topology(gpus, nvml=fake)
    assert topo.nvlink_peers[0] == {1: 4, 2: 4, 3: 4} and topo.matrix[0][3] == "NV4"
    # switch links without a type are not guessed to be switch links: their end is unknown
    fake, gpus = fake_gpus(nvlink="nvswitch", not_supported={
        "nvmlDeviceGetNvLinkRemoteDeviceType"})
    topo = topology(gpus, nvml=fake)
    assert topo.nvswitch_links == (0,) * 8 and topo.nvlink_unknown_links == (12,) * 8
    assert topo.matrix[0][1] == "PIX" and topo.matrix[0][4] == "SYS"


def test_one_links_bad_bus_id_stays_in_that_link():
    class OneEmptyBusId(FakeNvml):
        def nvmlDeviceGetNvLinkRemotePciInfo(self, device, link):
            if device.index == 1 and link == 0:
                return SimpleNamespace(busId=b"", busIdLegacy=b"")
            return super().nvmlDeviceGetNvLinkRemotePciInfo(device, link)

    fake = OneEmptyBusId()
    gpus = discover_gpus(nvml=fake, cuda_properties=fake.cuda_properties())
    assert isinstance(gpus[1].nvlink_remote_bus_ids[0], NotAvailable)
    assert gpus[1].nvlink_remote_bus_ids[1] == "0000:07:00.0"
    topo = topology(gpus, nvml=fake)
    assert topo.nvlink_peers[1] == {0: 3, 2: 4, 3: 4} and topo.nvlink_unknown_links[1] == 1
    assert topo.matrix[1][0] == "NV3" and topo.matrix[0][1] == "NV4"


def test_links_to_an_ibm_cpu_are_neither_peers_nor_unknown():
    class PowerNine(FakeNvml):
        def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle, link):
            return self.NVML_NVLINK_DEVICE_TYPE_IBMNPU if link == 0 else \
                super().nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)

        def nvmlDeviceGetNvLinkRemotePciInfo(self, device, link):
            if link == 0:
                raise self.NVMLError_NotSupported()
            return super().nvmlDeviceGetNvLinkRemotePciInfo(device, link)

    fake = PowerNine()
    gpus = discover_gpus(nvml=fake, cuda_properties=fake.cuda_properties())
    assert gpus[0].nvlink_remote_types[:2] == ("ibmnpu", "gpu")
    topo = topology(gpus, nvml=fake)
    assert topo.nvlink_peers[0] == {1: 3, 2: 4, 3: 4} and topo.nvlink_unknown_links == (0,) * 8


def test_not_supported_calls_become_not_available():
    unsupported = {"nvmlDeviceGetEccMode", "nvmlDeviceGetTotalEccErrors",
                   "nvmlDeviceGetMemoryAffinity", "nvmlDeviceGetCpuAffinity",
                   "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTopologyCommonAncestor"}
    fake, gpus = fake_gpus(not_supported=unsupported, nvlink="none")
    g = gpus[0].to_dict()
    assert g["ecc_enabled"] == {"available": False,
                                "reason": "nvmlDeviceGetEccMode: Not Supported"}
    assert g["ecc_errors"]["volatile_uncorrected"]["reason"] == (
        "nvmlDeviceGetTotalEccErrors: Not Supported")
    assert g["power_w"]["available"] is False and g["cpu_affinity"]["available"] is False
    assert g["numa_node"] == {"available": False,  # fake bus ids are not in /sys either
                              "reason": "nvmlDeviceGetMemoryAffinity: Not Supported"}
    assert g["power_limit_w"] == 400.0
    matrix = topology(gpus, nvml=fake).matrix
    assert matrix[0][0] == "X" and matrix[0][1] == "n/a"
    json.dumps(g)


def test_numa_node_comes_from_memory_affinity_not_numa_node_id():
    class GraceLike(FakeNvml):
        """NumaNodeId names the GPU's own memory node (no CPUs) where GPU memory is a node."""

        def nvmlDeviceGetNumaNodeId(self, handle):
            return 4 + handle.index // 4

    fake = GraceLike()
    gpus = discover_gpus(nvml=fake, cuda_properties=fake.cuda_properties())
    assert [g.numa_node for g in gpus] == [0, 0, 0, 0, 1, 1, 1, 1]

    class TwoNodes(FakeNvml):
        def nvmlDeviceGetMemoryAffinity(self, handle, nodeSetSize, scope):
            assert scope == self.NVML_AFFINITY_SCOPE_NODE
            return [0b11] + [0] * (nodeSetSize - 1)

    fake = TwoNodes()
    assert discover_gpus(nvml=fake, cuda_properties=[])[0].numa_node == "0-1"


def test_numa_node_falls_back_to_the_kernels_pci_numa_node(tmp_path, monkeypatch):
    monkeypatch.setattr(device_mod, "SYSFS_PCI_DEVICES", tmp_path)
    for bus_id, node in (("0000:07:00.0", "1\n"), ("0000:0f:00.0", "-1\n")):
        (tmp_path / bus_id).mkdir()
        (tmp_path / bus_id / "numa_node").write_text(node)
    fake = FakeNvml(not_supported={"nvmlDeviceGetMemoryAffinity"})
    gpus = discover_gpus(nvml=fake, cuda_properties=[])
    assert gpus[0].numa_node == 1
    assert gpus[1].numa_node.reason == ("nvmlDeviceGetMemoryAffinity: Not Supported; the kernel "
                                        "reports no NUMA node for 0000:0f:00.0")
    assert gpus[2].numa_node.reason == "nvmlDeviceGetMemoryAffinity: Not Supported"


def test_without_nvml_but_with_torch_gpus_uses_torch_facts():
    fake = FakeNvml(init_error=FakeNvml.NVMLError_LibraryNotFound)
    gpus = discover_gpus(nvml=fake, cuda_properties=fake.cuda_properties())
    assert len(gpus) == 8
    g = gpus[3]
    assert (g.name, g.compute_capability, g.sm_count) == ("NVIDIA A800-SXM4-80GB", "8.0", 108)
    assert isinstance(g.power_w, NotAvailable) and "no NVIDIA driver" in g.power_w.reason


def test_without_nvml_or_torch_gpus_is_not_available():
    fake = FakeNvml(init_error=FakeNvml.NVMLError_DriverNotLoaded)
    result = discover_gpus(nvml=fake, cuda_properties=[])
    assert isinstance(result, NotAvailable) and "Driver Not Loaded" in result.reason


def test_sm_count_needs_a_matching_torch_device():
    fake = FakeNvml()
    other = fake.cuda_properties()[:1]
    other[0].uuid, other[0].pci_bus_id = "some-other-gpu", 0xEE  # a GPU NVML does not list
    gpus = discover_gpus(nvml=fake, cuda_properties=other)
    assert "CUDA_VISIBLE_DEVICES" in gpus[0].sm_count.reason
    no_torch = discover_gpus(nvml=fake, cuda_properties=[])
    assert "SM count comes from torch" in no_torch[0].sm_count.reason


def test_cpu_list_compacts_ranges():
    assert cpu_list([0b1011]) == "0-1,3"
    assert cpu_list([2**64 - 1, 1]) == "0-64"
    assert cpu_list([0, 0b100]) == "66"
    assert cpu_list([0]) == ""


def test_system_info_versions():
    info = system_info(nvml=FakeNvml())
    assert (info.driver_version, info.cuda_driver_version) == ("535.129.03", "12.2")
    assert info.matmul_fp32_precision in ("ieee", "tf32")
    assert info.conv_fp32_precision in ("ieee", "tf32")
    assert info.tf32_api == "fp32_precision"  # torch 2.13 has the fp32_precision settings
    if not HAS_CUDA:
        assert isinstance(info.torch_cuda_version, NotAvailable)
        assert isinstance(info.torch_cuda_usable, NotAvailable)
    json.dumps(info.to_dict())


@pytest.mark.skipif(HAS_CUDA or HAS_NVML, reason="checks the CPU-only path")
def test_real_machine_without_gpu():
    assert isinstance(discover_gpus(), NotAvailable)
    cpu = cpu_info()
    assert cpu.model and cpu.isa and cpu.logical_cores >= 1 and cpu.torch_threads >= 1
    assert cpu.memory_total_bytes > 2**20
    json.dumps(cpu.to_dict())
