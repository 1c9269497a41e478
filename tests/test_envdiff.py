"""Environment diff: every field named with its meaning (missing ones too), doctor reports and
results files on either side, and the same configs' throughputs side by side."""

import json

import matplotlib.colors
import pytest

from a800lab.cli import main
from a800lab.core.doctor import build_report
from a800lab.core.envdiff import (
    FIELDS,
    NA,
    Side,
    diff_files,
    diff_sides,
    format_diff,
    load_side,
    side_from_records,
    side_from_report,
)
from a800lab.core.results import Record, append_record
from tests.fake_nvml import FakeNvml

ENV_A800 = {"python": "3.11.9", "platform": "Linux-5.15", "hostname": "gpu-a", "torch": "2.5.1",
            "cuda": "12.1", "cudnn": 90100, "nccl": "2.21.5", "driver": "535.129.03",
            "cpu_model": "AMD EPYC 7763", "device_count": 8, "device": "cuda",
            "device_name": "NVIDIA A800-SXM4-80GB", "mode": "GPU", "fingerprint": "aaaa"}
ENV_H200 = {**ENV_A800, "hostname": "gpu-b", "driver": "550.54.15", "cuda": "12.4",
            "device_name": "NVIDIA H200", "fingerprint": "bbbb"}


def report(model="A800"):
    fake = FakeNvml(model=model)
    return build_report(nvml=fake, cuda_properties=fake.cuda_properties())


def record(env, throughput, *, size=1024, precision="bf16", stamp="2026-01-01T00:00:00",
           noisy=False, unit="TFLOP/s", outcome="ok"):
    return Record(workload="matmul", params={"size": size, "precision": precision},
                  outcome=outcome, throughput=throughput if outcome == "ok" else None,
                  throughput_unit=unit, env=env, timestamp=stamp,
                  noise={"noisy": noisy, "reasons": ["spread"] if noisy else []})


def full_facts():
    """A value for every field, as a side would carry it."""
    return {key: [f"{key}-value"] * 2 if key == "power_limit_w" else f"{key}-value"
            for key in FIELDS}


@pytest.mark.parametrize("key", list(FIELDS))
def test_every_field_that_differs_is_named_with_its_meaning(key):
    a = Side("a", "doctor report", full_facts())
    changed = {**full_facts(), key: "other"}
    d = diff_sides(a, Side("b", "doctor report", changed))
    assert [x.field for x in d.differences] == [key]
    assert d.differences[0].meaning == FIELDS[key][1]
    assert d.differences[0].label == FIELDS[key][0]
    assert len(d.same) == len(FIELDS) - 1 and not d.only_a and not d.only_b
    assert FIELDS[key][0] in format_diff(d)


@pytest.mark.parametrize("key", list(FIELDS))
def test_every_field_missing_on_one_side_is_named(key):
    facts = full_facts()
    lacking = {k: v for k, v in facts.items() if k != key}
    d = diff_sides(Side("a", "doctor report", facts), Side("b", "results", lacking))
    assert [x.field for x in d.only_a] == [key] and not d.differences and not d.only_b
    assert "doctor --json" in d.only_a[0].meaning  # how to record it
    d = diff_sides(Side("a", "doctor report", lacking), Side("b", "doctor report", facts))
    assert [x.field for x in d.only_b] == [key]
    assert "the other file does not record it" in d.only_b[0].meaning


def test_two_doctor_reports_a800_vs_h200():
    d = diff_sides(side_from_report(report("A800"), "a800.json"),
                   side_from_report(report("H200"), "h200.json"))
    fields = {x.field: x for x in d.differences}
    assert set(fields) == {"gpu_model", "compute_capability", "sm_clock_max_mhz",
                           "power_limit_w"}
    assert fields["power_limit_w"].a == [400.0] * 8 and fields["power_limit_w"].b == [700.0] * 8
    assert {"driver", "torch", "matmul_fp32_precision", "numa_node", "topology",
            "ecc_uncorrected", "gpu_count"} <= set(d.same)
    text = format_diff(d)
    assert "power limit (W): A 400 x8 | B 700 x8" in text
    assert "GPU model: A NVIDIA A800-SXM4-80GB x8 | B NVIDIA H200 x8" in text
    assert "Throughput" not in text  # reports carry no measurements


def test_report_settings_differ_per_gpu_and_in_software():
    a, b = report(), report()
    b["system"].update(driver_version="550.54.15", matmul_fp32_precision="tf32",
                       nccl_version="2.18.1")
    b["gpus"][3]["power_limit_w"] = 300.0
    b["gpus"][6]["ecc_enabled"] = False
    b["gpus"][1]["numa_node"] = {"available": False, "reason": "NVML: Not Supported"}
    d = diff_sides(side_from_report(a), side_from_report(b))
    fields = {x.field: x for x in d.differences}
    assert set(fields) == {"driver", "nccl", "matmul_fp32_precision", "power_limit_w",
                           "ecc_enabled", "numa_node"}
    text = format_diff(d)
    assert "B 400 on GPU 0-2,4-7; 300 on GPU 3" in text
    assert fields["numa_node"].b[1] == NA
    assert "TF32" in fields["matmul_fp32_precision"].meaning


def test_an_old_saved_report_is_read_with_defaults():
    old = report()
    system = old["system"]
    for key in ("matmul_fp32_precision", "conv_fp32_precision", "tf32_api"):
        del system[key]
    system.update(float32_matmul_precision="high", cudnn_allow_tf32=True)
    side = side_from_report(json.loads(json.dumps(old)))
    assert side.facts["matmul_fp32_precision"] == "tf32"


def test_torch_cuda_of_a_newer_major_than_the_driver_is_noted():
    r = report()
    r["system"]["torch_cuda_version"] = "12.4"  # the fake 535 driver supports CUDA 12.2:
    assert side_from_report(r, "b.json").notes == ()   # minor version compatibility
    r["system"].update(torch_cuda_version="12.4", cuda_driver_version="11.8",
                       driver_version="520.61.05")
    side = side_from_report(r, "b.json")
    assert side.notes and "supports CUDA up to 11.8" in side.notes[0]
    d = diff_sides(side_from_report(report()), side)
    assert any(n.startswith("B: torch was built for CUDA 12.4") for n in d.notes)


def test_results_files_line_up_the_same_configs(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for rec in (record(ENV_A800, 200.0, size=1024), record(ENV_A800, 250.0, size=4096),
                record(ENV_A800, 240.0, size=4096, stamp="2026-01-02T00:00:00", noisy=True),
                record(ENV_A800, 10.0, size=64),
                record(ENV_A800, None, size=8192, outcome="oom")):
        append_record(a, rec)
    for rec in (record(ENV_H200, 600.0, size=1024), record(ENV_H200, 720.0, size=4096),
                record(ENV_H200, 1.0, size=1024, unit="GB/s", precision="fp32")):
        append_record(b, rec)
    d = diff_files(a, b)
    assert {x.field for x in d.differences} == {"device_name", "driver", "torch_cuda",
                                                "hostname"}
    rows = {r.params["size"]: r for r in d.lineup}
    assert set(rows) == {1024, 4096}
    assert rows[1024].ratio == pytest.approx(3.0)
    assert rows[4096].a_throughput == 240.0 and rows[4096].a_noisy  # the newest record of A
    assert rows[4096].ratio == pytest.approx(3.0)
    assert d.geomean_ratio == pytest.approx(3.0)
    assert d.unmatched == (1, 1)  # size 64 only in A; the GB/s point only in B
    text = format_diff(d)
    assert "240!" in text and "3.00x" in text and "1 configs only in A, 1 only in B" in text
    assert "measured device: A NVIDIA A800-SXM4-80GB | B NVIDIA H200" in text
    assert json.loads(json.dumps(d.to_dict()))["lineup"][0]["ratio"] == pytest.approx(3.0)


def test_a_results_file_against_a_report_names_what_each_lacks(tmp_path):
    a = tmp_path / "a.jsonl"
    append_record(a, record(ENV_A800, 200.0))
    b = tmp_path / "doctor.json"
    b.write_text(json.dumps(report()))
    d = diff_files(a, b)
    assert {x.field for x in d.only_a} == {"device_name", "python", "platform", "hostname"}
    assert {"power_limit_w", "ecc_enabled", "numa_node", "matmul_fp32_precision"} <= \
        {x.field for x in d.only_b}
    assert "driver" in d.same  # the fake driver; torch is this machine's in the report
    assert {"torch", "torch_cuda"} <= {x.field for x in d.differences}
    assert "doctor --json" in format_diff(d)
    assert not d.lineup


def test_a_file_with_several_environments_compares_the_newest(tmp_path):
    path = tmp_path / "mixed.jsonl"
    append_record(path, record(ENV_H200, 700.0, stamp="2026-01-01T00:00:00"))
    append_record(path, record(ENV_A800, 200.0, stamp="2026-02-01T00:00:00"))
    side = load_side(path)
    assert side.facts["device_name"] == "NVIDIA A800-SXM4-80GB"
    assert [r.throughput for r in side.records] == [200.0]
    assert "2 environments" in side.notes[0] and "bbbb" in side.notes[0]


def test_cpu_fallback_records_carry_their_thread_count():
    env = {**ENV_A800, "mode": "CPU fallback", "device_name": "CPU: AMD EPYC 7763"}
    rec = Record(workload="matmul", params={"size": 64}, outcome="ok", throughput=0.1, env=env,
                 conditions={"torch_threads": 1})
    assert side_from_records([rec]).facts["torch_threads"] == 1


@pytest.mark.parametrize("content, message", [
    ("", "is empty"),
    ("hello\n", "neither a results file"),
    ('{"name": "x"}', "neither a doctor report nor a result record"),
])
def test_files_that_are_neither_kind_are_refused(tmp_path, content, message):
    path = tmp_path / "f.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_side(path)
    with pytest.raises(ValueError, match="is not a file"):
        load_side(tmp_path / "missing.jsonl")


def test_cli_diff_text_json_and_bad_input(tmp_path, capsys):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.json"
    append_record(a, record(ENV_A800, 200.0))
    b.write_text(json.dumps(report("H200")))
    assert main(["diff", str(a), str(b)]) == 0
    assert "Recorded only in B" in capsys.readouterr().out
    assert main(["diff", str(a), str(a), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["differences"] == [] and out["lineup"][0]["ratio"] == 1.0
    assert main(["diff", str(a), str(tmp_path / "nope.jsonl")]) == 2
    assert "is not a file" in capsys.readouterr().err


# ---- the panel and the figure ------------------------------------------------------------------
def two_results(tmp_path, noisy_size=None):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for size in (1024, 2048, 4096):
        append_record(a, record(ENV_A800, 200.0, size=size))
        append_record(b, record(ENV_H200, 100.0 if size == 4096 else 600.0, size=size,
                                noisy=size == noisy_size))
    return a, b


def test_diff_panel_compares_and_draws_the_lineup(tmp_path):
    from a800lab.widgets import DiffPanel

    a, b = two_results(tmp_path, noisy_size=2048)
    panel = DiffPanel(a, b, folders=[tmp_path])
    assert set(panel.a.options) == {str(a), str(b)}
    assert panel.diff is not None and len(panel.diff.lineup) == 3
    assert "4 differences" in panel.status.text and "3 configs side by side" in panel.status.text
    assert "what it means" in panel.output.value and "B/A" in panel.output.value
    assert panel.plot.layout.display is None and panel.figure is not None
    assert panel.compare(a, tmp_path / "nope.json") is None
    assert "Cannot compare" in panel.status.text and panel.diff.lineup  # the last one kept
    doctor = tmp_path / "doctor.json"
    doctor.write_text(json.dumps(report()))
    assert panel.compare(a, doctor) is not None
    assert panel.plot.layout.display == "none" and "Recorded in one file only" in \
        panel.output.value


def test_lineup_figure_names_both_sides_and_marks_noise(tmp_path):
    from a800lab.figures.diff import lineup_figure

    fig = lineup_figure(diff_files(*two_results(tmp_path, noisy_size=2048)))
    assert fig._suptitle.get_text() == ("B: NVIDIA H200 (GPU) vs A: NVIDIA A800-SXM4-80GB (GPU)")
    (ax,) = fig.axes
    bars = ax.patches
    assert [round(b.get_width(), 2) for b in bars] == [3.0, 3.0, 0.5]
    assert [b.get_hatch() for b in bars] == [None, "//", None]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "B slower" in labels and any("noisy" in t for t in labels)
    empty = lineup_figure(diff_sides(side_from_report(report()), side_from_report(report())))
    assert "no config measured ok on both sides" in empty.axes[0].texts[0].get_text()


def test_results_files_record_and_compare_the_tf32_setting(tmp_path):
    from a800lab.core.precision import matmul_precision
    from a800lab.core.results import read_records
    from a800lab.core.sweep import run_sweep

    def point(m):
        return {"throughput": 1.0}

    plain, tf32 = tmp_path / "ieee.jsonl", tmp_path / "tf32.jsonl"
    with matmul_precision("fp32"):
        run_sweep(point, {"m": [1]}, out=plain, device="cpu")
    with matmul_precision("tf32"):
        run_sweep(point, {"m": [1]}, out=tf32, device="cpu")
    assert read_records(plain)[0].env["matmul_fp32_precision"] == "ieee"
    assert read_records(tf32)[0].env["matmul_fp32_precision"] == "tf32"
    d = diff_files(plain, tf32)
    (difference,) = [x for x in d.differences if x.field == "matmul_fp32_precision"]
    assert (difference.a, difference.b) == ("ieee", "tf32")


def test_a_swing_inside_the_spread_or_on_one_machine_is_drawn_as_no_difference(tmp_path):
    """chapter 09's baseline: the same machine twice showed a 0.70x solid red 'B slower' bar."""
    from a800lab.core.envdiff import LineupRow
    from a800lab.figures.diff import lineup_figure

    def rec(size, times):
        return Record(workload="matmul", params={"size": size, "precision": "fp32"},
                      outcome="ok", throughput=1.0 / sorted(times)[len(times) // 2],
                      throughput_unit="TFLOP/s", time_ms=tuple(times),
                      env={"device_name": "CPU: x", "mode": "CPU fallback"})

    for name, records in (("a", [rec(64, [1.0, 1.1, 1.2, 1.3, 1.4]), rec(128, [1.0] * 5)]),
                          ("b", [rec(64, [1.2, 1.25, 1.3, 1.4, 1.5]), rec(128, [2.0] * 5)])):
        for r in records:
            append_record(tmp_path / f"{name}.jsonl", r)
    diff = diff_files(tmp_path / "a.jsonl", tmp_path / "b.jsonl")
    overlapping, apart = diff.lineup
    assert overlapping.within_spread and not apart.within_spread
    assert diff.same_environment  # one machine: every bar is run-to-run variation
    fig = lineup_figure(diff)
    bars = [p for p in fig.axes[0].patches if p.get_width() > 0]
    assert {b.get_facecolor()[:3] for b in bars} == {matplotlib.colors.to_rgb("tab:gray")}
    legend = [" ".join(t.get_text().split()) for t in fig.axes[0].get_legend().get_texts()]
    assert "same environment: run-to-run variation, no difference" in legend
    assert "B slower" not in legend
    assert "0.50x~" in format_diff(diff) and "same environment" in format_diff(diff)
    # two different environments: a difference beyond the spread is red, one inside it grey
    diff.differences.append(diff.only_a[0] if diff.only_a else object())
    colours = [b.get_facecolor()[:3] for b in lineup_figure(diff).axes[0].patches
               if b.get_width() > 0]
    assert colours == [matplotlib.colors.to_rgb("tab:gray"), matplotlib.colors.to_rgb("tab:red")]
    assert LineupRow("w", {}, "u", 1.0, 1.0, False, False).within_spread is False  # no samples


def test_doctor_reports_record_the_variables_that_matter_and_diff_names_each(monkeypatch):
    from a800lab.core.nccl_env import settings_that_matter

    assert settings_that_matter({"NCCL_IB_HCA": "mlx5_0", "HOME": "/root", "LD_PRELOAD": "x.so",
                                 "CUDA_VISIBLE_DEVICES": "0,1", "MY_TOKEN": "secret"}) == {
        "CUDA_VISIBLE_DEVICES": "0,1", "LD_PRELOAD": "x.so", "NCCL_IB_HCA": "mlx5_0"}
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "eth0")
    a = report()
    assert a["environ"]["NCCL_SOCKET_IFNAME"] == "eth0"
    b = {**a, "environ": {**a["environ"], "NCCL_SOCKET_IFNAME": "ib0", "OMP_NUM_THREADS": "4"}}
    d = diff_sides(side_from_report(a, "a.json"), side_from_report(b, "b.json"))
    assert [(x.label, x.a, x.b) for x in d.differences] == [
        ("NCCL_SOCKET_IFNAME", "eth0", "ib0"), ("OMP_NUM_THREADS", "(unset)", "4")]
    assert d.differences[0].meaning.startswith("NCCL_SOCKET_IFNAME: the network interface")
    assert "NCCL_SOCKET_IFNAME: A eth0 | B ib0" in format_diff(d)
    old = {k: v for k, v in b.items() if k != "environ"}   # a report from before the field
    assert not diff_sides(side_from_report(a, "a"), side_from_report(old, "old")).differences
