"""scripts/gpu_check.py on CPU: its judging, parsing and no-GPU behaviour (the GPU checks
themselves run on a lent GPU)."""

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.py"
spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
gpu_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_check)

# `nvidia-smi topo -m` of a 2-GPU PCIe box (driver 550: a "GPU NUMA ID" column, underlined
# header) and of an 8-GPU NVLink box with a NIC column.
TWO_GPUS = ("\x1b[4m\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
            "GPU0\t X \tPHB\t0-63\t0\t\tN/A\n"
            "GPU1\tPHB\t X \t0-63\t0\t\tN/A\n\nLegend:\n\n  X    = Self\n")
EIGHT_GPUS = "\t" + "\t".join(f"GPU{i}" for i in range(8)) + "\tmlx5_0\tCPU Affinity\n" + "".join(
    f"GPU{i}\t" + "\t".join(" X " if i == j else "NV12" for j in range(8)) + "\tPXB\t0-63\n"
    for i in range(8))


def test_topology_parser_keeps_only_gpu_cells():
    assert gpu_check.parse_topo_matrix(TWO_GPUS) == (["GPU0", "GPU1"], [["X", "PHB"],
                                                                        ["PHB", "X"]])
    labels, matrix = gpu_check.parse_topo_matrix(EIGHT_GPUS)
    assert labels == [f"GPU{i}" for i in range(8)] and len(matrix) == 8
    assert matrix[3][3] == "X" and matrix[3][4] == "NV12" and len(matrix[0]) == 8
    with pytest.raises(ValueError, match="no GPU header"):
        gpu_check.parse_topo_matrix("No devices were found\n")


def test_expectations_judge():
    assert gpu_check.expect_between("ratio", 0.98, 0.9, 1.1) == "ratio 0.98 (expect 0.9-1.1)"
    with pytest.raises(gpu_check.Failed, match=r"ratio 1.3 \(expect 0.9-1.1\)"):
        gpu_check.expect_between("ratio", 1.3, 0.9, 1.1)


def test_each_check_states_its_expectation_and_is_judged():
    def passing():
        """Two plus two is four."""
        return "4", {"value": 4}

    def failing():
        """Never holds."""
        raise gpu_check.Failed("0 (expect 1-2)")

    def crashing():
        raise ZeroDivisionError("boom")

    assert all(check.__doc__ for check in gpu_check.CHECKS.values())
    ok = gpu_check.run_check(passing)
    assert (ok["status"], ok["expect"], ok["details"]) == ("pass", "Two plus two is four.",
                                                           {"value": 4})
    assert gpu_check.run_check(failing)["status"] == "fail"
    crash = gpu_check.run_check(crashing)
    assert crash["status"] == "error" and "ZeroDivisionError" in crash["traceback"]
    assert gpu_check.run_check(lambda: ("skip: no nvidia-smi", {}))["status"] == "skip"


def test_without_a_gpu_it_fails_and_says_why(tmp_path, capsys):
    if gpu_check.HAS_CUDA:
        pytest.skip("this machine has a GPU")
    out = tmp_path / "report.json"
    assert gpu_check.main(["--out", str(out)]) == 1
    report = json.loads(out.read_text())
    assert report["error"].startswith("no CUDA device") and report["checks"] == {}
    assert report["environment"]["mode"] == "CPU fallback"
    assert capsys.readouterr().out.startswith("FAIL  gpu_check: no CUDA device")


def test_checks_that_do_not_fit_the_budget_are_recorded_as_not_run(tmp_path, monkeypatch,
                                                                    capsys):
    written = []

    def quick():
        """Holds."""
        written.append(json.loads((tmp_path / "out" / "gpu_check-fake-gpu.json").read_text())
                       if (tmp_path / "out" / "gpu_check-fake-gpu.json").exists() else None)
        return "fine", {}

    def slow():
        """Would take too long."""
        raise AssertionError("started past the budget")

    monkeypatch.setattr(gpu_check, "HAS_CUDA", True)
    monkeypatch.setattr(gpu_check, "environment", lambda device: {"device_name": "Fake GPU",
                                                                  "mode": "GPU"})
    monkeypatch.setattr(gpu_check, "fingerprint", lambda env: "f")
    monkeypatch.setattr(gpu_check, "CHECKS", {"quick": quick, "slow": slow, "again": quick})
    monkeypatch.setattr(gpu_check, "ESTIMATE_S", {"quick": 1, "slow": 500, "again": 1})
    monkeypatch.setattr(gpu_check, "default_out",
                        lambda name: tmp_path / "data" / "gpu_check-fake-gpu.json")
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    assert gpu_check.main(["--budget-s", "60"]) == 3
    report = json.loads((tmp_path / "data" / "gpu_check-fake-gpu.json").read_text())
    assert [report["checks"][n]["status"] for n in ("quick", "slow", "again")] == [
        "pass", "not run", "pass"]
    assert "takes ~500 s and" in report["checks"]["slow"]["summary"]
    assert report["not_run"] == ["slow"] and report["failed"] == []
    assert written[1]["checks"]["quick"]["status"] == "pass"  # written after the first check
    assert (tmp_path / "out" / "gpu_check-fake-gpu.json").read_text() == \
        (tmp_path / "data" / "gpu_check-fake-gpu.json").read_text()  # the lent box's copy
    assert "SKIP  slow: not run" in capsys.readouterr().out


def test_the_help_names_the_one_command_and_its_budget(capsys):
    with pytest.raises(SystemExit):
        gpu_check.main(["--help"])
    text = capsys.readouterr().out
    assert "python3 scripts/gpu_check.py " in text and "--budget-s 270" in text
    assert "at most 5" in text and "no ipywidgets" in text


def test_a_gpu_test_that_opens_a_panel_skips_where_ipywidgets_is_missing(tmp_path):
    """The lent GPU stack has no ipywidgets: a test module importing a panel at its top is left
    out, and a test importing one in its body (indented) is skipped with that reason."""
    import os
    import subprocess
    import sys

    import conftest

    assert conftest.imports_panels("import os\n\nfrom a800lab.widgets import X\n",
                                   top_level=True)
    assert not conftest.imports_panels("def t():\n    from a800lab.widgets import X\n",
                                       top_level=True)
    assert conftest.imports_panels("def t():\n    import ipywidgets\n", top_level=False)
    assert not conftest.imports_panels("from a800lab.widgetsmith import X\n", top_level=False)
    blocked = tmp_path / "ipywidgets"
    blocked.mkdir()
    (blocked / "__init__.py").write_text("raise ImportError('no ipywidgets on this stack')\n")
    repo = SCRIPT.parents[1]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-m", "gpu", "-p", "no:cacheprovider",
         "-p", "no:nbval", "tests", "-k", "energy_gpu or comm_panel"],
        cwd=repo, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(repo)])})
    assert proc.returncode in (0, 5), proc.stdout[-2000:]  # 5: nothing left to run
    assert "test_energy_gpu.py: opens a panel: ipywidgets is not installed" in proc.stdout
    assert "error" not in proc.stdout.lower() and "comm_panel" not in proc.stdout
