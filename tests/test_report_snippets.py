"""The getting-started guide's code run as printed: the snippets the lab runs are the guide's
own code blocks, TensorFlow lives in a venv of its own (the `tf` extra's requirement), and where
it is prepared (CI prepares it) the TensorFlow rows decide on what TensorFlow did: D.4.6 raises
on `optimizer.zero_grad()` after applying the last micro-batch's gradient / 4, D.4.8's policy
trains like float32, D.3.1 runs. Without TensorFlow the rows say how to install it and the
torch emulation decides."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from a800lab.cli import main
from a800lab.core.results import read_records
from a800lab.report.claims import FAILS, HOLDS, METHOD_ON_CPU, UNTESTABLE
from a800lab.report.run import POINTS_FILE
from a800lab.workloads import guide_snippets, tf_env
from tests.test_report_verdicts import judge, rec, snippet

REPO = Path(__file__).resolve().parents[1]
NEEDS_TF = pytest.mark.skipif(tf_env.tf_python() is None, reason=(
    "TensorFlow's venv is not prepared here (`python -m a800lab report --tf-env`; CI runs it)"))


def test_the_snippets_run_are_the_guides_code_blocks_as_printed():
    text = (REPO / "docs" / "guide" / "getting-started.en.md").read_text(encoding="utf-8")
    d31, d46, d48 = re.findall(r"```python\n(.*?)```", text, re.S)
    assert guide_snippets.D31_TORCH + "\n" + guide_snippets.D31_TF == d31
    assert guide_snippets.D46 == d46
    assert d48.startswith(guide_snippets.D48_TF) and "torch.cuda.amp" in d48[
        len(guide_snippets.D48_TF):]    # the rest is the PyTorch half, amp_trains' recipe


def test_tensorflow_is_the_tf_extras_requirement_in_a_venv_of_its_own(tmp_path, monkeypatch):
    extra = re.search(r"^tf = \[(.*)\]$", (REPO / "pyproject.toml").read_text(), re.M)
    assert extra and extra.group(1) == f'"{tf_env.TF_REQUIREMENT}"'     # the `tf` extra
    assert tf_env.GPU_REQUIREMENT.replace("tensorflow[and-cuda]", "tensorflow-cpu") == \
        tf_env.TF_REQUIREMENT
    monkeypatch.setenv("A800LAB_TF_VENV", str(tmp_path / "venv"))
    calls = []
    assert tf_env.prepare_tf_env(gpu=True, run=lambda cmd, check: calls.append(cmd)) == \
        tmp_path / "venv"
    assert calls[0] == [sys.executable, "-m", "venv", str(tmp_path / "venv")]
    assert calls[1][1:] == ["-m", "pip", "install", "--quiet", tf_env.GPU_REQUIREMENT]
    monkeypatch.setattr(tf_env.importlib.util, "find_spec", lambda name: None)
    assert tf_env.tf_python() is None      # an empty venv folder is no TensorFlow
    assert "python -m a800lab report --tf-env" in tf_env.tf_missing()


def test_report_tf_env_prepares_the_venv_or_fails_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(tf_env, "prepare_tf_env", lambda gpu: Path("/x/tf-venv"))
    assert main(["report", "--tf-env"]) == 0
    assert "TensorFlow's venv: /x/tf-venv" in capsys.readouterr().out

    def failing(gpu):
        raise subprocess.CalledProcessError(1, ["pip", "install"])

    monkeypatch.setattr(tf_env, "prepare_tf_env", failing)
    with pytest.raises(SystemExit) as exit_:
        main(["report", "--tf-env"])
    assert exit_.value.code == 1
    assert capsys.readouterr().err.startswith("a800lab: error: preparing TensorFlow's venv")


def snippets_record(tf: bool, d46_error="AttributeError: 'Adam' object has no attribute "
                    "'zero_grad'", gpus: int = 0):
    """A guide_snippets record as the battery writes it, with or without TensorFlow."""
    results = {"D.3.1": {"error": "", "gpus": gpus, "memory_growth": [True] * gpus,
                         "visible_gpus": min(gpus, 1)},
               "D.4.6": {"error": d46_error, "applied_steps": 1, "micro_batch": 8, "steps": 4,
                         "gap": 0.9, "last_gap": 0.0},
               "D.4.8": {"error": "", "policy": "mixed_float16", "compute_dtype": "float16",
                         "variable_dtype": "float32", "losses": {
                             p: [{"start": 1.0, "loss": v, "optimizer": o} for v in (0.05, 0.051)]
                             for p, o in (("float32", "Adam"),
                                          ("mixed_float16", "LossScaleOptimizer"))}}}
    return rec("guide_snippets", {"snippets": "D.3.1 D.4.6 D.4.8"}, 0.1, torch={
        "error": "", "gpus": gpus, "total_memory_bytes": [85_100_000_000] * gpus},
        tensorflow="2.21.0" if tf else None, keras="3.15.1",
        tf_missing="" if tf else "TensorFlow is not installed: `python -m a800lab report "
        "--tf-env` prepares ...", results=results if tf else {})


def test_with_tensorflow_the_snippet_decides_and_the_emulation_is_beside():
    v = judge(snippet(3e-7, 0.77) + [snippets_record(True)])["accum_snippet"]
    assert v["status"] == FAILS and "raised AttributeError: 'Adam' object has no attribute " \
        "'zero_grad'" in v["measured"] and "0.9 from one batch of 32's" in v["measured"]
    beside = {r["name"]: r["status"] for r in v["other_readings"]}
    assert beside == {"the torch emulation": FAILS, "the fix": HOLDS}
    ran = judge(snippet(3e-7, 0.77) + [snippets_record(True, d46_error="")])["accum_snippet"]
    assert ran["status"] == FAILS     # no exception, still one micro-batch's gradient / 4


def test_without_tensorflow_the_rows_say_how_to_install_it_and_the_emulation_decides():
    records = snippet(3e-7, 0.77) + [snippets_record(False)]
    v = judge(records)
    assert v["accum_snippet"]["status"] == FAILS
    assert "--tf-env" in v["accum_snippet"]["reason"]
    assert "the torch emulation: 4 x 16" in v["accum_snippet"]["measured"]
    assert v["device_snippet"]["status"] == UNTESTABLE and "--tf-env" in \
        v["device_snippet"]["reason"]


def test_d31_on_a_gpu_box_lists_gib_as_gb_and_sets_memory_growth():
    v = judge([snippets_record(True, gpus=8)])["device_snippet"]
    assert v["status"] == HOLDS and "printed 79.26GB for 85.1 GB" in v["measured"]
    assert {r["name"]: r["status"] for r in v["other_readings"]} == {"the 'GB' label": FAILS}
    assert judge([snippets_record(True, gpus=8)], "cpu")["device_snippet"]["status"] == \
        METHOD_ON_CPU


@NEEDS_TF
def test_the_tensorflow_rows_run_as_written_in_the_quick_battery(quick_cpu_report):
    report, folder = quick_cpu_report
    record = next(r for r in read_records(folder / POINTS_FILE) if r.label == "guide_snippets")
    assert record.outcome == "ok", record.message
    m = record.metrics
    assert m["tensorflow"] and not m["tf_error"]
    d46, d48 = m["results"]["D.4.6"], m["results"]["D.4.8"]
    assert d46["error"].startswith("AttributeError") and "zero_grad" in d46["error"]
    assert d46["applied_steps"] == 1 and d46["last_gap"] < 1e-6 < 0.1 < d46["gap"]
    assert d48["policy"] == "mixed_float16" and d48["compute_dtype"] == "float16"
    assert d48["losses"]["mixed_float16"][0]["optimizer"] == "LossScaleOptimizer"
    assert m["results"]["D.3.1"]["error"] == ""
    rows = {c["id"]: c for c in report["claims"]}
    assert rows["accum_snippet"]["status"] == FAILS and "TensorFlow" in \
        rows["accum_snippet"]["measured"]
    assert rows["device_snippet"]["status"] == METHOD_ON_CPU
    tf_half = next(r for r in rows["amp_trains"]["other_readings"]
                   if r["name"] == "the TensorFlow half")
    assert "LossScaleOptimizer" in tf_half["text"]
