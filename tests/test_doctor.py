"""The doctor report: advice lines on the fake A800 box, JSON round trip, CPU-only path, CLI."""

import argparse
import copy
import json
import sys

import pytest
import torch

from a800lab.cli import main
from a800lab.cli.machine import doctor_command
from a800lab.core import nvml as nvml_mod
from a800lab.core.backends import HAS_CUDA, HAS_NVML
from a800lab.core.doctor import advice, build_report, format_report
from a800lab.core.precision import matmul_precision
from tests.fake_nvml import FakeNvml
from tests.tf32_state import reset_to_defaults


@pytest.fixture
def tf32_defaults():
    """torch's default TF32 settings (TF32 off for matmuls) before and after the test."""
    reset_to_defaults()
    yield
    reset_to_defaults()


def fake_report(**variant):
    fake = FakeNvml(**variant)
    return build_report(nvml=fake, cuda_properties=fake.cuda_properties())


def lines_with(report, text):
    return [line for line in report["advice"] if text in line]


def test_report_structure():
    report = fake_report()
    assert report["gpu_found"] is True and report["no_gpu_reason"] == ""
    assert set(report) == {"system", "cpu", "environ", "gpu_found", "no_gpu_reason", "gpus",
                           "topology", "advice"}
    assert len(report["gpus"]) == 8
    assert report["topology"]["matrix"][0][4] == "SYS"
    assert report["topology"]["numa_node"] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert "SYS" in report["topology"]["legend"]


def test_ecc_advice_names_gpu_5_and_counts():
    [line] = lines_with(fake_report(), "ECC errors")
    assert line.startswith("GPU 5 has ECC errors")
    assert "uncorrected 2 since boot / 3 lifetime" in line and "corrected 17 / 154" in line


def test_throttle_advice_names_gpu_2_and_reasons_but_not_idle_gpus():
    [line] = lines_with(fake_report(), "throttled")
    assert line.startswith("GPU 2 clocks are throttled (sw_power_cap, hw_thermal_slowdown)")
    assert "1095/1410 MHz" in line and "87 C" in line


@pytest.mark.parametrize("mask, reason", [(0x200, "board_limit"), (0x400, "reliability")])
def test_a_gpu_held_only_by_board_limit_or_reliability_is_throttled(mask, reason):
    fake = FakeNvml()
    fake.gpus[6].throttle_mask, fake.gpus[6].sm_clock_mhz = mask, 1005
    report = build_report(nvml=fake, cuda_properties=fake.cuda_properties())
    assert report["gpus"][6]["throttle_reasons"] == [reason]
    [line] = [line for line in report["advice"] if line.startswith("GPU 6 clocks")]
    assert f"GPU 6 clocks are throttled ({reason}): SM 1005/1410 MHz" in line
    assert "nvidia-smi -q -d PERFORMANCE" in line


def test_sys_pairs_advice():
    [line] = lines_with(fake_report(), "SYS")
    for pair in ("0-4", "0-7", "3-4", "3-7"):
        assert pair in line
    assert "0-1" not in line and "4-5" not in line
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0,1,2,3 numactl --cpunodebind=0 " \
           "--membind=0" in line
    assert "GPUs 4,5,6,7 (NUMA node 1)" in line
    assert not lines_with(fake_report(nvlink="nvswitch"), "SYS")


@pytest.mark.parametrize("switch_pci", ["readable", "empty", "error"])
def test_nvswitch_box_has_no_far_pairs_whatever_its_switch_pci_ids(switch_pci):
    report = fake_report(nvlink="nvswitch", switch_pci=switch_pci)
    assert not lines_with(report, "SYS") and not lines_with(report, "NVLink")
    assert report["topology"]["matrix"][0][5] == "NV12"
    assert json.loads(json.dumps(report)) == report


def test_links_nvml_cannot_place_are_not_called_no_nvlink():
    report = fake_report(nvlink="nvswitch",
                         not_supported={"nvmlDeviceGetNvLinkRemoteDeviceType"})
    [line] = lines_with(report, "SYS")
    assert "(no NVLink NVML can place: it cannot tell where the NVLinks of GPU(s) " \
           "0,1,2,3,4,5,6,7 lead)" in line


def test_cross_numa_pcie_pairs_are_reported_without_nvlink():
    [line] = lines_with(fake_report(nvlink="none"), "SYS")
    assert "0-4" in line and "0-1" not in line
    assert "GPUs 0,1,2,3 (NUMA node 0)" in line


def test_mig_advice_only_when_on():
    assert not lines_with(fake_report(), "MIG")
    [line] = lines_with(fake_report(mig=True), "MIG is on")
    assert "GPU(s) 0,1,2,3,4,5,6,7" in line and "-mig 0" in line


def test_tf32_advice(tf32_defaults):
    report = fake_report()
    [line] = lines_with(report, "TF32 is off")
    assert "GPU(s) 0,1,2,3,4,5,6,7" in line
    assert "torch.backends.cuda.matmul.fp32_precision = 'tf32'" in line  # torch's current API
    assert "torch.backends.cudnn.conv.fp32_precision = 'tf32'" in line
    report["system"]["tf32_api"] = "allow_tf32"  # a torch without fp32_precision
    [line] = [line for line in advice(report) if "TF32 is off" in line]
    assert "torch.set_float32_matmul_precision('high')" in line
    report["system"]["matmul_fp32_precision"] = "tf32"
    assert not [line for line in advice(report) if "TF32" in line]
    report["system"]["matmul_fp32_precision"] = "ieee"
    for gpu in report["gpus"]:
        gpu["compute_capability"] = "7.0"  # V100: no TF32
    assert not [line for line in advice(report) if "TF32" in line]


def test_report_after_tf32_was_set_with_torchs_new_api(tf32_defaults):
    torch.backends.cuda.matmul.fp32_precision = "tf32"  # torch's legacy getters now raise
    report = fake_report()
    assert report["system"]["matmul_fp32_precision"] == "tf32"
    assert not lines_with(report, "TF32")
    assert "matmul tf32, conv tf32" in format_report(report)


@pytest.mark.parametrize("mode, matmul", [("fp32", "ieee"), ("tf32", "tf32")])
def test_report_while_a_sweep_holds_matmul_precision(tf32_defaults, mode, matmul):
    with matmul_precision(mode):  # as while a panel's sweep runs and the device panel refreshes
        report = fake_report()
    assert report["system"]["matmul_fp32_precision"] == matmul
    assert report["system"]["conv_fp32_precision"] == matmul
    assert bool(lines_with(report, "TF32 is off")) == (mode == "fp32")


def test_cuda_build_newer_than_driver():
    report = fake_report()
    # minor version compatibility: any CUDA 12.x build runs on a 535 driver (CUDA 12.2)
    report["system"]["torch_cuda_version"] = "12.4"
    assert not [line for line in advice(report) if "supports CUDA up to" in line]
    # another major release does not: say which driver runs it, or the forward-compat package
    report["system"].update(torch_cuda_version="12.1", cuda_driver_version="11.8",
                            driver_version="520.61.05")
    [line] = [line for line in advice(report) if "supports CUDA up to" in line]
    assert "CUDA 12.1" in line and "520.61.05" in line and "11.8" in line
    assert "driver >= 525.60" in line and "cuda-compat" in line


@pytest.mark.skipif(HAS_CUDA, reason="torch here can use the GPU")
def test_torch_that_cannot_use_the_gpus_is_reported():
    [line] = lines_with(fake_report(), "torch cannot use them")
    assert line.startswith("NVML sees 8 GPU(s)")


def test_not_supported_calls_appear_as_not_available_in_the_report():
    report = fake_report(not_supported={"nvmlDeviceGetEccMode", "nvmlDeviceGetTotalEccErrors",
                                        "nvmlDeviceGetCurrentClocksEventReasons",
                                        "nvmlDeviceGetNumaNodeId", "nvmlDeviceGetCpuAffinity"})
    gpu = report["gpus"][5]
    assert gpu["ecc_enabled"] == {"available": False,
                                  "reason": "nvmlDeviceGetEccMode: Not Supported"}
    assert gpu["throttle_reasons"]["available"] is False
    assert not lines_with(report, "ECC errors") and not lines_with(report, "throttled")
    text = format_report(report)
    assert "n/a" in text and "GPU5" in text


def test_json_round_trip_keeps_report_and_advice():
    report = fake_report(mig=True)
    again = json.loads(json.dumps(report))
    assert again == report
    assert advice(again) == report["advice"]
    assert advice(copy.deepcopy(again)) == advice(again)


def test_format_report_looks_like_topo_m():
    text = format_report(fake_report())
    lines = text.splitlines()
    header = next(line for line in lines if line.lstrip().startswith("GPU0  GPU1"))
    assert header.endswith("CPU Affinity  NUMA Affinity")
    row0 = next(line for line in lines if line.startswith("GPU0  X"))
    assert row0.split() == ["GPU0", "X", "NV4", "NV4", "NV4", "SYS", "SYS", "SYS", "SYS",
                            "0-31,64-95", "0"]
    assert "NVIDIA A800-SXM4-80GB" in text and "Legend:" in text and "Advice:" in text
    assert "  NV#  = Connection traversing a bonded set of # NVLinks" in text


def test_no_driver_report():
    report = build_report(nvml=FakeNvml(init_error=FakeNvml.NVMLError_DriverNotLoaded),
                          cuda_properties=[])
    assert report["gpu_found"] is False and report["gpus"] == [] and report["topology"] is None
    assert report["advice"][0].startswith("No NVIDIA GPU found: no NVIDIA driver")
    assert "Driver Not Loaded" in report["advice"][0]
    assert report["system"]["driver_version"]["available"] is False


def test_no_library_report(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr(nvml_mod, "_real_module", None)
    report = build_report(cuda_properties=[])
    assert report["gpu_found"] is False
    assert "pynvml is not importable" in report["no_gpu_reason"]
    assert report["cpu"]["model"]


@pytest.mark.skipif(HAS_CUDA or HAS_NVML, reason="checks the CPU-only path")
def test_cpu_only_report_on_this_machine():
    report = build_report()
    assert report["gpu_found"] is False
    [line] = report["advice"]
    assert line.startswith("No NVIDIA GPU found: ")
    assert report["cpu"]["model"] and report["cpu"]["isa"] == (
        torch.backends.cpu.get_cpu_capability())
    assert report["cpu"]["logical_cores"] >= 1
    text = format_report(report)
    assert "No NVIDIA GPU found" in text and report["cpu"]["model"] in text


def test_doctor_json_output_parses(capsys):
    assert main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {"system", "cpu", "gpus", "advice"} <= set(report)
    assert doctor_command(argparse.Namespace(json=True), nvml=FakeNvml()) == 0
    assert len(json.loads(capsys.readouterr().out)["gpus"]) == 8


def test_doctor_prints_text(capsys):
    assert main(["doctor"]) == 0
    assert "Advice:" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["doctor", "--bogus"])


def test_a_report_saved_by_an_earlier_a800lab_is_still_read():
    fake = FakeNvml()
    report = json.loads(json.dumps(build_report(nvml=fake, cuda_properties=fake.cuda_properties())))
    old = dict(report, system={k: v for k, v in report["system"].items()
                               if k not in ("matmul_fp32_precision", "conv_fp32_precision",
                                            "tf32_api")},
               gpus=[{k: v for k, v in g.items() if k != "cuda_index"} for g in report["gpus"]],
               topology={k: v for k, v in report["topology"].items()
                         if k != "nvlink_unknown_links"})
    old["system"].update(float32_matmul_precision="highest", cudnn_allow_tf32=True)
    lines = advice(old)
    assert any(line.startswith("TF32 is off for float32 matmuls") for line in lines)
    assert any("GPU 5 has ECC errors" in line for line in lines)
    assert "GPU0" in format_report(old)
