"""The command line: doctor, peak and a headless matmul sweep with resume and bad input."""

import json
import subprocess
import sys

from a800lab.__main__ import main
from a800lab.core.results import read_records


def test_module_entry_point_runs_doctor_json():
    proc = subprocess.run([sys.executable, "-m", "a800lab", "doctor", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["gpu_found"] is False  # this CI machine has no GPU
    assert report["advice"][0].startswith("No NVIDIA GPU found")
    assert report["cpu"]["logical_cores"] >= 1


def test_doctor_table(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "Advice:" in out and "No NVIDIA GPU found" in out


def test_sweep_writes_and_resumes(tmp_path, capsys):
    out = tmp_path / "runs.jsonl"
    args = ["sweep", "matmul", "--size", "32", "64", "--budget-s", "0.01", "--out", str(out)]
    assert main(args) == 0
    records = read_records(out)
    assert [(r.params["size"], r.outcome) for r in records] == [(32, "ok"), (64, "ok")]
    assert records[0].throughput_unit == "TFLOP/s" and records[0].metrics["rel_error"] < 1e-5
    assert main(args[:4] + ["96"] + args[4:]) == 0
    assert [r.params["size"] for r in read_records(out)] == [32, 64, 96]
    assert "1 points measured, 2 already in" in capsys.readouterr().err


def test_sweep_rectangular_shapes(tmp_path):
    out = tmp_path / "runs.jsonl"
    assert main(["sweep", "matmul", "--m", "16", "--n", "32", "--k", "8", "24",
                 "--budget-s", "0.01", "--out", str(out)]) == 0
    assert [r.params for r in read_records(out)] == [
        {"m": 16, "n": 32, "k": 8, "precision": "fp32"},
        {"m": 16, "n": 32, "k": 24, "precision": "fp32"}]


def test_bad_input_exits_2_with_a_message(tmp_path, capsys):
    out = str(tmp_path / "runs.jsonl")
    assert main(["sweep", "matmul", "--size", "-5", "--out", out]) == 2
    assert "m=-5 must be a positive int" in capsys.readouterr().err
    assert main(["sweep", "matmul", "--size", "8", "--precision", "fp99", "--out", out]) == 2
    assert "unknown precision 'fp99'" in capsys.readouterr().err
    assert main(["sweep", "matmul", "--size", "8", "--out", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert not (tmp_path / "runs.jsonl").exists()  # nothing ran


def test_peak_json(capsys):
    assert main(["peak", "--json", "--device", "cpu"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["entries"][0]["precision"] == "fp32" and report["entries"][0]["tflops"] > 0
    assert report["mem_bw_gbs"] > 0
