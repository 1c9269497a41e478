"""Health checks: ECC counters, remapped rows and retired pages read (never changed) with a
verdict per GPU; the NCCL variables and transports; the stress run's flagging logic on
synthetic cards; `a800lab health`."""

import json

import pytest

from a800lab.cli import main
from a800lab.core.nccl_env import (
    NCCL_VARIABLES,
    nccl_settings,
    transport_advice,
    transports_from_log,
)
from a800lab.workloads.health import format_health, health_report, memory_verdict
from a800lab.workloads.stress import CardResult, StressReport, flag_cards, stress_report
from tests.fake_nvml_counters import CounterFakeNvml

A800 = "NVIDIA A800-SXM4-80GB"


def report_of(fake):
    return health_report(nvml=fake, cuda_properties=fake.cuda_properties())


# ---- memory health -----------------------------------------------------------------------------
def test_a800_box_remapped_rows_read_and_judged():
    fake = CounterFakeNvml()
    fake.remapped[3] = (2, 1, 1, 0)     # a remap pending after an uncorrectable error
    fake.remapped[7] = (0, 8, 0, 1)     # remapping failed: no spare rows left
    report = report_of(fake)
    gpus = {g["index"]: g for g in report["gpus"]}
    assert gpus[3]["remapped_rows"] == {"correctable": 2, "uncorrectable": 1, "pending": True,
                                        "failure": False}
    assert gpus[0]["retired_pages"] == {"available": False,
                                        "reason": "nvmlDeviceGetRetiredPages: Not Supported"}
    verdicts = {i: g["verdict"] for i, g in gpus.items()}
    # the fake's GPU 5 has 2 uncorrected errors since boot (volatile): drain
    assert verdicts == {0: "ok", 1: "ok", 2: "ok", 3: "watch", 4: "ok", 5: "drain", 6: "ok",
                        7: "drain"}
    advice = " ".join(report["advice"])
    assert "nvidia-smi -r -i 3" in advice and "row remapping failed" in advice
    text = format_health(report)
    assert "0/8 (failure)" in text and "2/1 (pending)" in text and "drain" in text
    assert json.loads(json.dumps(report)) == report


def test_pre_ampere_retired_pages_read_and_judged():
    fake = CounterFakeNvml(retirement=True)
    fake.retired[1] = {"sbe": 4, "dbe": 1, "pending": 1}
    gpu = report_of(fake)["gpus"][1]
    assert gpu["retired_pages"] == {"single_bit": 4, "double_bit": 1, "pending": True}
    assert gpu["remapped_rows"]["available"] is False
    assert gpu["verdict"] == "watch" and any("reboot" in r for r in gpu["reasons"])


def test_judge_on_plain_dicts():
    def gpu(**changes):
        base = {"index": 0, "ecc_enabled": True,
                "ecc_errors": {"volatile_uncorrected": 0, "aggregate_uncorrected": 0},
                "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False,
                                  "failure": False},
                "retired_pages": {"available": False, "reason": "Not Supported"}}
        return {**base, **changes}

    assert memory_verdict(gpu()) == ("ok", [])
    verdict, reasons = memory_verdict(gpu(ecc_errors={"volatile_uncorrected": 0,
                                             "aggregate_uncorrected": 3}))
    assert verdict == "watch" and "lifetime" in reasons[0]
    assert memory_verdict(gpu(ecc_enabled=False))[0] == "watch"
    na = {"available": False, "reason": "x"}
    assert memory_verdict(gpu(ecc_errors={"volatile_uncorrected": na}, remapped_rows=na))[0] == "ok"


def test_health_reads_and_never_writes():
    class Recording(CounterFakeNvml):
        def __getattribute__(self, name):
            if name.startswith("nvmlDevice") and name.startswith(("nvmlDeviceSet",
                                                                  "nvmlDeviceReset",
                                                                  "nvmlDeviceClear")):
                raise AssertionError(f"health called {name}")
            return super().__getattribute__(name)

    assert report_of(Recording())["gpu_found"]


def test_no_gpu_says_so():
    fake = CounterFakeNvml(init_error=CounterFakeNvml.NVMLError_DriverNotLoaded)
    report = health_report(nvml=fake, cuda_properties=[])
    assert not report["gpu_found"] and "Driver Not Loaded" in format_health(report)


# ---- NCCL --------------------------------------------------------------------------------------
# Written for this test in the shape of NCCL 2.18+ INFO lines (not captured from a real run).
SYNTHETIC_LOG = """\
node1:1234:1300 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
node1:1234:1300 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
node1:1234:1300 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read
node1:1234:1300 [0] NCCL INFO Channel 00/0 : 3[3] -> 4[0] [send] via NET/IB/0/GDRDMA
node1:1234:1300 [0] NCCL INFO Channel 00/0 : 4[0] -> 3[3] [receive] via NET/IB/1
node1:1234:1300 [0] NCCL INFO Channel 02/0 : 1[1] -> 2[2] via SHM/direct/direct
node1:1234:1300 [0] NCCL INFO Ring 00 : 5[5] -> 6[6] via NET/Socket/0
node1:1234:1300 [0] NCCL INFO Connected all rings
"""


def test_transports_are_counted_from_an_info_log():
    counts = transports_from_log(SYNTHETIC_LOG)
    assert counts == {"P2P/CUMEM": 2, "NET/IB+GDRDMA": 1, "NET/IB": 1, "SHM/direct": 1,
                      "NET/Socket": 1}
    advice = " ".join(transport_advice(counts))
    assert "TCP sockets" in advice and "nvidia-peermem" in advice and "host memory" in advice
    assert transport_advice({"P2P/CUMEM": 4}) == ["Only P2P and GPUDirect RDMA connections: "
                                                  "the fast paths."]
    assert "NCCL_DEBUG=INFO" in transport_advice({})[0]


def test_nccl_settings_read_the_environment():
    settings = {s["name"]: s for s in nccl_settings({"NCCL_DEBUG": "INFO"})}
    assert settings["NCCL_DEBUG"]["value"] == "INFO"
    assert settings["NCCL_IB_HCA"]["value"] is None
    assert len(settings) == len(NCCL_VARIABLES) and all(s["what"] for s in settings.values())


# ---- stress flags ------------------------------------------------------------------------------
def card(i, tflops, gbs, name=A800, **kwargs):
    return CardResult(f"cuda:{i}", name, "bf16", tflops, gbs, datasheet_tflops=312.0,
                      datasheet_gbs=2039.0, **kwargs)


def test_a_card_below_its_siblings_is_flagged():
    cards = [card(i, 270.0 + i, 1750.0) for i in range(8)]
    cards[5] = card(5, 225.0, 1760.0)       # 17% below the others' median: flagged
    cards[6] = card(6, 250.0, 1740.0)       # 8% below: inside the 10% threshold
    flags = flag_cards(cards)
    assert [(f.device, f.metric, f.against) for f in flags] == [("cuda:5", "matmul_tflops",
                                                                 "siblings")]
    assert flags[0].reference == pytest.approx(272.0) and flags[0].ratio < 0.9
    assert "17% below the median" in flags[0].message
    assert [f.device for f in flag_cards(cards, threshold=0.05)] == ["cuda:5", "cuda:6"]


def test_a_card_below_its_datasheet_is_flagged_and_noise_is_said():
    cards = [card(0, 150.0, 1100.0, noisy=True), card(1, 155.0, 1750.0)]
    flags = flag_cards(cards)
    kinds = {(f.device, f.metric, f.against) for f in flags}
    assert kinds == {("cuda:0", "matmul_tflops", "datasheet"),
                     ("cuda:1", "matmul_tflops", "datasheet"),
                     ("cuda:0", "copy_gbs", "siblings"), ("cuda:0", "copy_gbs", "datasheet")}
    assert all("noisy" in f.message for f in flags if f.device == "cuda:0")


def test_siblings_are_cards_of_the_same_model_and_failed_cards_are_skipped():
    cards = [card(0, 280.0, 1750.0), card(1, 275.0, 1745.0),
             card(2, 700.0, 4000.0, name="NVIDIA H200"),
             card(3, None, None, message="out of memory")]
    assert flag_cards(cards) == []
    cpu = CardResult("cpu", "CPU: x", "fp32", 0.05, 10.0)
    assert flag_cards([cpu]) == []  # no siblings, no datasheet
    for bad in (0, 1.5, -0.1):
        with pytest.raises(ValueError, match="fraction"):
            flag_cards(cards, threshold=bad)


def test_stress_report_text_and_json():
    cards = (card(0, 280.0, 1750.0), card(1, 200.0, 1750.0))
    report = StressReport(cards, tuple(flag_cards(cards)))
    text = report.format()
    assert "cuda:1" in text and "29% below the median" in text
    assert json.loads(json.dumps(report.to_dict()))["flags"][0]["ratio"] == pytest.approx(200 / 280)


def test_stress_run_on_this_cpu():
    report = stress_report(["cpu"], budget_s=0.02, size=64, copy_bytes=1 << 20)
    (only,) = report.cards
    assert only.device == "cpu" and only.matmul_tflops > 0 and only.copy_gbs > 0
    assert only.datasheet_tflops is None and report.flags == ()
    assert "one card" in report.format()


# ---- the command -------------------------------------------------------------------------------
def test_cli_health_json_and_stress(capsys):
    assert main(["health", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["health"]["gpu_found"] is False and out["stress"] is None
    assert {s["name"] for s in out["nccl"]} >= {"NCCL_DEBUG", "NCCL_IB_HCA"}
    assert main(["health", "--stress", "--budget-s", "0.02"]) == 0
    captured = capsys.readouterr()
    assert "Stress run (a throughput check, not a memory test):" in captured.out
    assert "NCCL_DEBUG=" in captured.out and "DCGM: " in captured.out
    assert "[1] cpu:" in captured.err
    assert main(["health", "--stress", "--threshold", "2"]) == 2
    assert "must be a fraction" in capsys.readouterr().err


def test_stress_figure_marks_the_flagged_card():
    from matplotlib.colors import to_rgba

    from a800lab.figures.health import stress_figure

    cards = [card(i, 272.0, 1750.0) for i in range(4)] + [card(4, 220.0, 1750.0)]
    fig = stress_figure(StressReport(tuple(cards), tuple(flag_cards(cards))))
    assert fig._suptitle.get_text() == f"{A800} (GPU), 5 card(s)"
    matmul, copy = fig.axes
    red = [i for i, bar in enumerate(matmul.patches) if bar.get_facecolor() == to_rgba("tab:red")]
    assert red == [4]
    assert matmul.get_title() == "matmul TFLOP/s" and copy.get_legend() is not None
    cpu = stress_figure(StressReport((CardResult("cpu", "CPU: x", "fp32", 0.05, 9.0),), ()))
    assert "(CPU fallback)" in cpu._suptitle.get_text()


# ---- DCGM --------------------------------------------------------------------------------------
def test_dcgm_is_offered_when_present_and_its_absence_says_what_to_install():
    from a800lab.workloads.dcgm import dcgm_status

    missing = dcgm_status(which=lambda name: None)
    assert not missing["found"] and "install NVIDIA DCGM" in missing["advice"]
    assert "dcgmi diag -r 3" in missing["advice"] and "nvidia-smi has no memory stress test" \
        in missing["advice"] and "memory clock is fixed" in missing["advice"]
    found = dcgm_status(which=lambda name: "/usr/bin/dcgmi")
    assert found["found"] and "health --dcgm" in found["advice"] and "-r 1" in found["advice"]


def test_the_quick_diagnostic_runs_level_1_only_and_failures_say_why():
    import subprocess

    from a800lab.workloads.dcgm import run_quick_diag

    seen = []

    def fake_run(argv, **kwargs):
        seen.append(argv)
        return subprocess.CompletedProcess(argv, 0, stdout="Deployment | Pass\n", stderr="")

    result = run_quick_diag(run=fake_run)
    assert seen == [["dcgmi", "diag", "-r", "1"]] and result["returncode"] == 0
    assert "Pass" in result["output"]

    def missing(argv, **kwargs):
        raise FileNotFoundError(argv[0])

    def hangs(argv, **kwargs):
        raise subprocess.TimeoutExpired(argv, kwargs["timeout"])

    with pytest.raises(ValueError, match="not on the PATH"):
        run_quick_diag(run=missing)
    with pytest.raises(ValueError, match="nv-hostengine"):
        run_quick_diag(run=hangs, timeout_s=1)


def test_cli_health_dcgm_exits_1_when_the_diagnostic_fails(monkeypatch, capsys):
    import subprocess

    from a800lab.workloads import dcgm

    monkeypatch.setattr(dcgm.subprocess, "run", lambda argv, **kw: subprocess.CompletedProcess(
        argv, 1, stdout="Persistence Mode | Fail\n", stderr=""))
    assert main(["health", "--dcgm"]) == 1
    out = capsys.readouterr().out
    assert "dcgmi diag -r 1 (exit 1):" in out and "Persistence Mode | Fail" in out
