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

    assert all(check.run.__doc__ for check in gpu_check.CHECKS.values())
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


def fake_machine(monkeypatch, tmp_path, checks: dict, stages: dict):
    """gpu_check on a pretend GPU machine whose checks are `checks` ({name: (fn, seconds)})."""
    monkeypatch.setattr(gpu_check, "HAS_CUDA", True)
    monkeypatch.setattr(gpu_check, "environment", lambda device: {"device_name": "Fake GPU",
                                                                  "mode": "GPU"})
    monkeypatch.setattr(gpu_check, "fingerprint", lambda env: "f")
    monkeypatch.setattr(gpu_check, "CHECKS", checks)
    monkeypatch.setattr(gpu_check, "STAGES", stages)
    monkeypatch.setattr(gpu_check, "default_out",
                        lambda name: tmp_path / "data" / "gpu_check-fake-gpu.json")
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    return tmp_path / "data" / "gpu_check-fake-gpu.json"


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

    Check = gpu_check.Check
    out = fake_machine(monkeypatch, tmp_path, {"quick": Check(quick, 1, 2),
                                               "slow": Check(slow, 500, 600),
                                               "again": Check(quick, 1, 2)},
                       {1: ("one", ["quick", "slow", "again"])})
    assert gpu_check.main(["--budget-s", "60"]) == 3
    report = json.loads(out.read_text())
    assert [report["checks"][n]["status"] for n in ("quick", "slow", "again")] == [
        "pass", "not run", "pass"]
    assert "takes ~500 s and" in report["checks"]["slow"]["summary"]
    assert report["not_run"] == ["slow"] and report["failed"] == []
    assert written[1]["checks"]["quick"]["status"] == "pass"  # written after the first check
    assert (tmp_path / "out" / "gpu_check-fake-gpu.json").read_text() == out.read_text()
    assert "SKIP  slow: not run" in capsys.readouterr().out


def test_the_plan_fits_a_lease_and_every_stage_can_pass(tmp_path, monkeypatch, capsys):
    """Each stage fits its budget by estimate (so none ends "not run" when the card is as
    quick as estimated), the whole plan fits the lease with the machine's start-up, and a
    later stage adds its checks to the same report."""
    assert set(gpu_check.CHECKS) == {n for _, names in gpu_check.STAGES.values() for n in names}
    total = gpu_check.MACHINE_START_S
    for number in gpu_check.STAGES:
        assert gpu_check.stage_estimate_s(number) <= gpu_check.STAGE_BUDGET_S, number
        total += gpu_check.stage_estimate_s(number)
    assert total <= gpu_check.LEASE_S == 900
    assert gpu_check.main(["--plan"]) == 0
    plan = capsys.readouterr().out
    assert "python3 scripts/gpu_check.py --stage 1" in plan and f"lease: ~{total} s" in plan
    stage_one = gpu_check.STAGES[1][1]
    assert stage_one[:4] == ["doctor", "device", "timing", "tf32"] and "oom" in stage_one

    def passing():
        """Holds."""
        return "fine", {}

    checks = {name: check._replace(run=passing) for name, check in gpu_check.CHECKS.items()}
    out = fake_machine(monkeypatch, tmp_path, checks, gpu_check.STAGES)
    for number, (_, names) in gpu_check.STAGES.items():
        assert gpu_check.main(["--stage", str(number)]) == 0  # reachable: nothing "not run"
        report = json.loads(out.read_text())
        assert {n for n, r in report["checks"].items() if r["stage"] == number} == set(names)
    assert set(json.loads(out.read_text())["checks"]) == set(gpu_check.CHECKS)


def test_the_plan_prints_without_a_gpu_with_each_stages_worst_case_and_the_sharing():
    """A laptop plans the lease: --plan runs with no GPU visible, states each stage's estimate
    and worst case, and says which two stages may share one 600 s command (their worst cases
    within it) and which may not."""
    import os
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(SCRIPT), "--plan"], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0, proc.stderr
    plan = proc.stdout
    for number in gpu_check.STAGES:
        assert (f"stage {number} (" in plan and f"~{gpu_check.stage_estimate_s(number)} s, at "
                f"worst ~{gpu_check.stage_worst_s(number)} s" in plan)
    limit = gpu_check.COMMAND_S - gpu_check.TRANSFER_S
    for a, b in [(1, 2), (1, 3), (2, 3)]:
        worst = gpu_check.shared_worst_s((a, b))
        may = worst <= limit
        assert f"{a} and {b} {'may' if may else 'may not'} (~{worst} s" in plan
        assert (f"--stage {a} {b}" in plan) == may
    assert gpu_check.stage_worst_s(3) == gpu_check.PROCESS_START_S + gpu_check.STAGE_BUDGET_S


def test_stage_three_runs_the_serving_checks_before_the_gpu_tests(tmp_path, monkeypatch):
    """The serving checks cannot be starved: they run first, and the gpu tests get what is
    left of the stage (less 5 s)."""
    ran, given = [], []

    def serving_check(name):
        def check():
            ran.append(name)
            return "fine", {}
        check.__doc__ = f"{name} holds."
        return check

    def gpu_tests(timeout_s=150.0):
        """The gpu tests pass."""
        ran.append("gpu_tests")
        given.append(timeout_s)
        return "fine", {}

    monkeypatch.setattr(gpu_check, "check_gpu_tests", gpu_tests)
    names = gpu_check.STAGES[3][1]
    assert names[-1] == "gpu_tests" and {"serving", "serve_compile", "decode"} <= set(names)
    checks = {n: gpu_check.CHECKS[n]._replace(run=gpu_tests if n == "gpu_tests" else
                                               serving_check(n)) for n in names}
    fake_machine(monkeypatch, tmp_path, checks, {3: gpu_check.STAGES[3]})
    assert gpu_check.main(["--stage", "3"]) == 0
    assert ran == names
    assert gpu_check.STAGE_BUDGET_S - 6 < given[0] <= gpu_check.STAGE_BUDGET_S - 5


def test_topology_without_a_matrix_is_skipped_with_the_reason(monkeypatch):
    """A virtualised GPU's nvidia-smi may print no topology matrix: nothing to compare."""
    import subprocess
    from types import SimpleNamespace

    import gpu_checks_device as device

    monkeypatch.setattr(device.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(device.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(
        a, 0, stdout="GPU0 is not connected to any other GPU\n", stderr=""))
    import a800lab.core.device as lab_device

    monkeypatch.setattr(lab_device, "discover_gpus", lambda: [])
    monkeypatch.setattr(lab_device, "topology", lambda gpus: SimpleNamespace(
        to_dict=lambda: {"labels": ["GPU0"], "matrix": [["X"]]}))
    result = gpu_check.run_check(device.check_topology)
    assert result["status"] == "skip", result
    assert "printed no matrix" in result["summary"] and "not connected" in result["summary"]


def test_the_oom_check_leaves_the_cards_memory_free(monkeypatch):
    """After the OOM check, torch's cache holds nothing of it (the next checks' free memory)."""
    import gpu_checks_device as device

    from a800lab.core import sweep

    class Allocator:  # a caching allocator: freed blocks stay reserved until empty_cache()
        total, allocated, reserved = 100, 0, 0

        def mem_get_info(self, index=0):
            return self.total - self.reserved, self.total

        def memory_allocated(self, index=0):
            return self.allocated

        def empty_cache(self):
            self.reserved = self.allocated

    cuda = Allocator()

    class Block:
        n = 0  # a block refused for want of memory holds nothing

        def __init__(self, n):
            if cuda.allocated + n > cuda.total:
                raise RuntimeError("CUDA out of memory")  # what the point turns into "oom"
            cuda.allocated += n
            cuda.reserved = max(cuda.reserved, cuda.allocated)
            self.n = n

        def numel(self):
            return self.n

        def __del__(self):
            cuda.allocated -= self.n

    fake_torch = type("FakeTorch", (), {"cuda": cuda, "uint8": None, "empty": staticmethod(
        lambda n, dtype=None, device=None: Block(n))})
    monkeypatch.setattr(device, "torch", fake_torch)

    def run_sweep(fn, axes, device):  # as the real one: an "oom" record, memory freed after
        try:
            fn(**{k: v[0] for k, v in axes.items()})
        except RuntimeError as exc:
            record = sweep.Record(workload="hog", params={}, outcome="oom", message=str(exc))
        else:
            raise AssertionError("no out-of-memory")
        cuda.empty_cache()
        return sweep.SweepResult([record])

    monkeypatch.setattr(sweep, "run_sweep", run_sweep)
    summary, details = device.check_oom()
    assert details["outcome"] == "oom" and cuda.allocated == 0
    assert cuda.reserved == 0, "the check left its blocks in torch's cache"


def test_the_profile_check_fails_when_gemms_are_not_counted_as_matmul(monkeypatch):
    """The expectation can fail: a step whose GEMMs landed in "other compute" (as cuBLAS's nvjet
    kernels did) holds under 30% matmul/conv at batch 64."""
    from types import SimpleNamespace

    import gpu_checks_training as training

    from a800lab.workloads.training import profile

    def fake_profile(spec, device, steps):
        matmul = 0.1 if spec.batch_size == 64 else 0.05
        breakdown = SimpleNamespace(categories_ms={"matmul/conv": matmul, "other compute": 0.9},
                                    window_ms=1.0, launch_wait_ms=0.2 if spec.batch_size == 2
                                    else 0.0, launches=10, top_ops=[])
        return SimpleNamespace(breakdown=breakdown, to_dict=lambda: {}, profiler_log="")

    monkeypatch.setattr(profile, "profile_step", fake_profile)
    result = gpu_check.run_check(training.check_profile)
    assert result["status"] == "fail"
    assert "b=64 matmul/conv share of the profiled window 0.1 (expect 0.3-1)" in \
        result["summary"]


def test_fp8_s_peak_is_recorded_not_judged(monkeypatch):
    """fp8 with cuBLAS's precise accumulation has no published rate to expect: recorded."""
    from types import SimpleNamespace

    import gpu_checks_device as device

    from a800lab.workloads import peak

    entries = [SimpleNamespace(precision="bf16", outcome="ok", ratio=0.8, tflops=790,
                               message=""),
               SimpleNamespace(precision="fp8", outcome="ok", ratio=0.3, tflops=600,
                               message="")]
    monkeypatch.setattr(peak, "measure_peak", lambda device: SimpleNamespace(
        entries=entries, mem_bw_ratio=0.9, spec_name="H200", device_name="H200",
        to_dict=lambda: {}))
    result = gpu_check.run_check(device.check_peak)
    assert result["status"] == "pass", result
    assert "fp8 0.3 of the datasheet with precise accumulation (recorded, no floor)" in \
        result["summary"]
    entries[0].ratio = 0.4
    assert gpu_check.run_check(device.check_peak)["status"] == "fail"


def test_a_gpu_test_that_opens_a_panel_skips_where_ipywidgets_is_missing(tmp_path):
    """The lent GPU stack has no ipywidgets: a test module importing a panel at its top is left
    out, and a test importing one in its body (indented) is skipped with that reason."""
    import os
    import subprocess
    import sys

    from tests.panel_imports import imports_panels

    assert imports_panels("import os\n\nfrom a800lab.widgets import X\n",
                                   top_level=True)
    assert not imports_panels("def t():\n    from a800lab.widgets import X\n",
                                       top_level=True)
    assert imports_panels("def t():\n    import ipywidgets\n", top_level=False)
    assert not imports_panels("from a800lab.widgetsmith import X\n", top_level=False)
    assert imports_panels("def t():\n    from a800lab import widgets\n",
                                   top_level=False)
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


@pytest.mark.parametrize("pct, status", [(3.5, "pass"), (0.2, "fail"), (150.0, "fail")])
def test_decode_is_judged_from_the_bytes_its_step_reads(monkeypatch, pct, status):
    """Batch 1's % of the bandwidth bound is expected from its bytes and its launches (a few %
    for GPT-2 small's 0.3 GB on an H100's bandwidth), never over 100."""
    import gpu_checks_serving as serving

    from a800lab.workloads.serving import decode

    bound_ms = 0.3e9 / 3.0e12 * 1e3  # 0.3 GB at 3 TB/s
    low, high = serving.decode_expectation(0.3e9, bound_ms, 12)
    assert 0.5 < low < 3.5 < high < 100  # the review's 3-4% is inside, 1-100% is not the band

    def fake_point(batch_size, **kwargs):
        ms = bound_ms / (pct / 100) * (1.2 if batch_size == 16 else 1.0)
        return {"ms_per_token": ms, "bytes_per_step": 0.3e9, "bound_ms_measured": bound_ms,
                "bound_ms_datasheet": bound_ms * 0.8, "pct_of_bound": 100 * bound_ms / ms}

    monkeypatch.setattr(decode, "decode_point", fake_point)
    result = gpu_check.run_check(serving.check_decode)
    assert result["status"] == status, result
    assert "batch 1 % of that bound (eager: launch-bound)" in result["summary"]


def test_levers_compiles_with_the_attention_back_end_pinned(monkeypatch):
    """The CUDA-graph capture of levers never leaves SDPA's choice to torch (cuDNN's on Hopper
    with CUDA 13): the compiled run pins flash."""
    import gpu_checks_training as training

    from a800lab.workloads.training import point

    calls = []

    def fake_train_point(**kwargs):
        calls.append(kwargs)
        return {"throughput": 1.0, "compile_s": 9.0, "recompiles": 0, "compiled_graphs": 1,
                "graph_breaks": 0, "loss": 1.0, "mfu_pct_of_datasheet_peak": 30.0}

    monkeypatch.setattr(point, "train_point", fake_train_point)
    result = gpu_check.run_check(training.check_levers)
    assert result["status"] == "pass", result
    compiled = [c for c in calls if c.get("compile", "off") != "off"]
    assert compiled and all(c["attention"] == "flash" for c in compiled)


@pytest.mark.parametrize("default_fails", [False, True])
def test_serving_compiles_its_reduce_overhead_path_once_and_records_the_time(monkeypatch,
                                                                           default_fails):
    """serve_compile runs serving's reduce-overhead path as a user does; a cuDNN attention
    failure under capture is recorded as torch's and the path runs again with flash pinned."""
    import torch
    from gpu_checks_serving import check_serve_compile

    from a800lab.workloads.serving import point

    calls = []

    def fake_serve_point(**kwargs):
        flash_only = not torch.backends.cuda.cudnn_sdp_enabled()
        calls.append((kwargs["compile"], flash_only))
        if kwargs["compile"] == "off":
            return {"p50_ms": 2.0}
        if default_fails and not flash_only:
            raise RuntimeError("cuDNN Frontend error: graph capture failed")
        return {"p50_ms": 0.5, "compile_s": 21.0, "compiled_graphs": 1, "recompiles": 0}

    monkeypatch.setattr(point, "serve_point", fake_serve_point)
    result = gpu_check.run_check(check_serve_compile)
    assert result["status"] == "pass", result
    assert "compiled in 21.0 s" in result["summary"]
    assert "reduce-overhead p50 / eager p50 at batch 1 0.25" in result["summary"]
    if default_fails:
        assert calls == [("reduce-overhead", False), ("reduce-overhead", True), ("off", True)]
        assert "cuDNN Frontend error" in result["details"]["default_sdpa_failed"]
        assert result["details"]["sdpa"] == "flash"
    else:
        assert calls == [("reduce-overhead", False), ("off", False)]
