"""Sweeps: grid, callbacks, OOM and errors as data, cancel, resume, and a killed writer."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch

from a800lab.core import sweep as sweep_mod
from a800lab.core.cancel import CancelToken
from a800lab.core.results import load_results, read_records, records_to_frame
from a800lab.core.sweep import grid, run_sweep
from a800lab.core.timing import Timing


def point(m, precision="fp32"):
    return {"throughput": float(m), "throughput_unit": "TFLOP/s", "rel_error": 1e-7,
            "timing": Timing(samples_ms=(1.0, 1.1), warmup=1, device="cpu")}


def test_grid_order_and_errors():
    assert grid({"a": [1, 2], "b": ["x", "y"]}) == [
        {"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 2, "b": "x"}, {"a": 2, "b": "y"}]
    with pytest.raises(ValueError, match="no axes"):
        grid({})
    with pytest.raises(ValueError, match="axis 'a' has no values"):
        grid({"a": []})
    with pytest.raises(ValueError, match="axis 'a' needs a list"):
        grid({"a": "fp32"})


def test_progress_results_and_file(tmp_path):
    progress, seen = [], []
    out = tmp_path / "runs.jsonl"
    res = run_sweep(point, {"m": [1, 2, 3]}, fixed={"precision": "fp32"}, workload="toy",
                    out=out, on_progress=lambda d, t, eta: progress.append((d, t, eta)),
                    on_result=seen.append)
    assert [d for d, _, _ in progress] == [1, 2, 3] and {t for _, t, _ in progress} == {3}
    assert progress[-1][2] == 0  # nothing left
    assert [r.throughput for r in seen] == [1.0, 2.0, 3.0]
    stored = read_records(out)
    assert [r.params for r in stored] == [{"precision": "fp32", "m": m} for m in (1, 2, 3)]
    assert stored[0].time_ms == (1.0, 1.1) and stored[0].metrics == {"rel_error": 1e-7}
    assert stored[0].env["fingerprint"] and res.total == 3 and not res.cancelled


def test_oom_is_a_data_point_and_memory_is_freed(monkeypatch):
    freed = []
    monkeypatch.setattr(sweep_mod, "free_after_oom", lambda: freed.append(1))

    def fn(m):
        if m == 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
        return point(m)

    res = run_sweep(fn, {"m": [1, 2, 3]})
    assert [r.outcome for r in res.records] == ["ok", "oom", "ok"]
    assert "Tried to allocate" in res.records[1].message and freed == [1]


def test_errors_and_missing_throughput_are_recorded():
    def fn(m):
        if m == 1:
            raise ZeroDivisionError("boom")
        if m == 2:
            return {"samples_per_s": 10.0}
        if m == 3:
            return {"loss": 0.5}
        return 42

    res = run_sweep(fn, {"m": [1, 2, 3, 4]}, throughput_key="samples_per_s")
    outcomes = [(r.outcome, r.message) for r in res.records]
    assert outcomes[0] == ("error", "ZeroDivisionError: boom")
    assert outcomes[1][0] == "ok" and res.records[1].throughput == 10.0
    assert res.records[1].throughput_unit == "samples_per_s"
    assert outcomes[2][0] == "error" and "no usable throughput" in outcomes[2][1]
    assert outcomes[3][0] == "error" and "returned int" in outcomes[3][1]


def test_wrong_results_keep_their_error_but_no_throughput():
    res = run_sweep(lambda m: {"outcome": "wrong", "message": "rel err 0.5", "rel_error": 0.5,
                               "throughput": 9.0}, {"m": [1]})
    r = res.records[0]
    assert r.outcome == "wrong" and r.throughput is None and r.metrics == {"rel_error": 0.5}


def test_cancel_stops_after_the_current_point():
    token = CancelToken()

    def fn(m):
        if m == 2:
            token.cancel()
        return point(m)

    res = run_sweep(fn, {"m": [1, 2, 3, 4]}, cancel=token)
    assert [r.params["m"] for r in res.records] == [1, 2] and res.cancelled


def test_resume_skips_done_points_and_retries_errors(tmp_path):
    out, calls = tmp_path / "runs.jsonl", []

    def flaky(m):
        calls.append(m)
        if m == 2 and calls.count(2) == 1:
            raise RuntimeError("transient")
        return point(m)

    run_sweep(flaky, {"m": [1, 2]}, out=out)
    res = run_sweep(flaky, {"m": [1, 2, 3]}, out=out)
    assert calls == [1, 2, 2, 3]
    assert res.skipped == 1 and [r.params["m"] for r in res.records] == [2, 3]
    assert [r.outcome for r in read_records(out)] == ["ok", "error", "ok", "ok"]


def test_a_result_echoing_its_parameter_is_kept_once():
    """A point function that reports a parameter it was given (decode's prompt_tokens) is not
    an error; a different value under a parameter's name still is."""
    def echo(m, steps):
        return {**point(m), "steps": steps}

    def contradicts(m, steps):
        return {**point(m), "steps": steps + 1}

    (record,) = run_sweep(echo, {"m": [1]}, fixed={"steps": 4}).records
    assert record.outcome == "ok" and record.params["steps"] == 4 and "steps" not in \
        record.metrics
    (record,) = run_sweep(contradicts, {"m": [1]}, fixed={"steps": 4}).records
    assert record.outcome == "error" and "both a parameter and a metric" in record.message


def test_conflicting_fixed_and_swept_axis():
    with pytest.raises(ValueError, match=r"\['m'\] are both fixed and swept"):
        run_sweep(point, {"m": [1]}, fixed={"m": 2})


KILLED_WRITER = textwrap.dedent("""
    import sys, time
    from a800lab.core.sweep import run_sweep

    def slow(m):
        time.sleep(0.15)
        return {"throughput": float(m), "throughput_unit": "items/s", "pad": "x" * 4000}

    run_sweep(slow, {"m": list(range(1, 200))}, workload="slow", out=sys.argv[1])
""")


def test_sigkill_mid_sweep_loses_no_completed_record(tmp_path):
    out = tmp_path / "runs.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(out)])
    deadline = time.time() + 60
    while time.time() < deadline:
        if out.exists() and out.read_bytes().count(b"\n") >= 5:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    completed = out.read_bytes().count(b"\n")
    records = read_records(out)  # a torn tail, if any, is only warned about
    assert completed >= 5 and len(records) == completed
    assert [r.params["m"] for r in records] == list(range(1, completed + 1))

    # Resuming measures only what is missing.
    res = run_sweep(lambda m: {"throughput": 1.0}, {"m": list(range(1, completed + 3))},
                    workload="slow", out=out)
    assert res.skipped == completed and [r.params["m"] for r in res.records] == [
        completed + 1, completed + 2]


def test_point_functions_that_take_cancel_get_the_token():
    token, seen = CancelToken(), []

    def fn(m, cancel=None):
        seen.append(cancel)
        return point(m)

    run_sweep(fn, {"m": [1]}, cancel=token)
    run_sweep(fn, {"m": [1]})
    assert seen == [token, None]


def test_reserved_parameter_names_are_refused():
    with pytest.raises(ValueError, match=r"\['outcome'\] are reserved"):
        run_sweep(point, {"outcome": [1]})


def test_a_real_host_allocation_failure_is_an_oom_record():
    def allocate(nbytes):
        x = torch.empty(nbytes, dtype=torch.uint8)  # 1 EiB: beyond any address space
        return {"throughput": float(x.numel())}

    res = run_sweep(allocate, {"nbytes": [1024, 2**60, 2048]}, device="cpu")
    assert [r.outcome for r in res.records] == ["ok", "oom", "ok"]
    assert "allocate" in res.records[1].message


# ---- the sweep's device reaches the workload --------------------------------------------------
def test_a_point_function_that_takes_device_gets_the_sweeps_device():
    seen = []

    def fn(m, device="auto"):
        seen.append(device)
        return point(m)

    run_sweep(fn, {"m": [1]}, device="cpu")
    run_sweep(fn, {"m": [1], "device": ["cpu"]}, device="cpu")  # a swept device is the user's
    assert seen == ["cpu", "cpu"]


class _NoWindow:
    """A PointWindow stand-in for a device this CPU machine does not have."""

    def __init__(self, device, sampler=None):
        self.device = device

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def memory(self):
        return {}

    def telemetry(self):
        return None

    def conditions(self):
        return {}


def test_a_point_function_without_device_runs_inside_that_device(monkeypatch):
    entered, seen = [], []

    class Recorder:
        def __init__(self, device):
            self.device = device

        def __enter__(self):
            entered.append(self.device)

        def __exit__(self, *exc):
            entered.append("exit")

    monkeypatch.setattr(sweep_mod, "resolve_device", lambda device: device)
    monkeypatch.setattr(sweep_mod, "PointWindow", _NoWindow)
    monkeypatch.setattr(sweep_mod, "_cuda_device", Recorder)
    monkeypatch.setattr(sweep_mod, "environment", lambda device: {"device": device})
    monkeypatch.setattr(sweep_mod, "warm_runtime", lambda device: None)  # no GPU here

    def fn(m):
        seen.append(list(entered))
        return point(m)

    run_sweep(fn, {"m": [1]}, device="cuda:1")
    assert seen == [["cuda:1"]] and entered == ["cuda:1", "exit"]


# ---- out of memory: freed once the traceback is gone ------------------------------------------
def test_memory_of_an_oom_point_is_dead_when_it_is_freed(monkeypatch):
    import weakref

    refs, dead_when_freed = [], []
    real_free = sweep_mod.free_after_oom

    def checking_free():
        dead_when_freed.append(refs[0]() is None)
        real_free()

    monkeypatch.setattr(sweep_mod, "free_after_oom", checking_free)

    def fn(m):
        held = torch.ones(1024, 1024)  # what the point holds when it runs out of memory
        refs.append(weakref.ref(held))
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 60.00 GiB")

    res = run_sweep(fn, {"m": [1]})
    assert res.records[0].outcome == "oom"
    assert dead_when_freed == [True]  # freed after the except block, not inside it


# ---- whatever a workload raises or returns, the sweep goes on ---------------------------------
def test_system_exit_from_a_workload_is_an_error_record():
    def fn(m):
        if m == 2:
            raise SystemExit(2)  # argparse inside a user's code
        return point(m)

    res = run_sweep(fn, {"m": [1, 2, 3]})
    assert [r.outcome for r in res.records] == ["ok", "error", "ok"]
    assert res.records[1].message == "SystemExit: 2"


def test_keyboard_interrupt_still_stops_the_sweep():
    def fn(m):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(fn, {"m": [1]})


@pytest.mark.parametrize("bad, why", [
    ({"time_ms": 3.5}, "time_ms"),
    ({"time_ms": ["fast", "slow"]}, "time_ms"),
    ({"time_ms": [1.0, float("nan")]}, "time_ms"),
    ({"memory": 12}, "memory"),
    ({"memory": {"peak_allocated_bytes": "lots"}}, "memory"),
    ({"timing": [1.0, 2.0]}, "timing"),
    ({"telemetry": "hot"}, "telemetry"),
])
def test_a_malformed_result_is_an_error_record_and_the_sweep_goes_on(tmp_path, bad, why):
    out = tmp_path / "runs.jsonl"

    def fn(m):
        return {"throughput": 1.0, **bad} if m == 2 else point(m)

    res = run_sweep(fn, {"m": [1, 2, 3]}, out=out)
    assert [r.outcome for r in res.records] == ["ok", "error", "ok"]
    assert "unusable workload result" in res.records[1].message and why in res.records[1].message
    df = load_results(out)  # the file and the frame still build
    assert list(df["outcome"]) == ["ok", "error", "ok"]


@pytest.mark.parametrize("value", [np.float32(2.5), np.float64(2.5), np.int64(2),
                                   torch.tensor(2.5), np.array(2.5)])
def test_numpy_scalars_and_0d_tensors_are_throughputs(value):
    res = run_sweep(lambda m: {"throughput": value, "time_ms": [np.float32(1.0)]}, {"m": [1]})
    record = res.records[0]
    assert record.outcome == "ok" and record.throughput == pytest.approx(float(value))
    assert type(record.throughput) is float and record.time_ms == (1.0,)


def test_duplicate_axis_values_are_measured_once():
    calls = []
    res = run_sweep(lambda m: calls.append(m) or point(m), {"m": [64, 64, 128, 64]})
    assert calls == [64, 128] and res.total == 2
    assert grid({"m": [[1, 2], [1, 2]]}) == [{"m": [1, 2]}]  # unhashable values too


def test_an_empty_or_unwritable_out_is_refused_before_running(tmp_path):
    calls = []
    fn = lambda m: calls.append(m) or point(m)  # noqa: E731
    with pytest.raises(ValueError, match="results path is empty"):
        run_sweep(fn, {"m": [1]}, out="")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        run_sweep(fn, {"m": [1]}, out=blocker / "runs.jsonl")
    with pytest.raises(ValueError, match="cannot write results to '/proc/runs.jsonl'"):
        run_sweep(fn, {"m": [1]}, out="/proc/runs.jsonl")  # refused even to root
    assert calls == [] and not (blocker.parent / "runs.jsonl").exists()


# ---- runs, threads and noise ------------------------------------------------------------------
def test_each_sweep_is_one_run_with_its_own_id(tmp_path):
    out = tmp_path / "runs.jsonl"
    first = run_sweep(point, {"m": [1, 2]}, out=out)
    second = run_sweep(point, {"m": [1, 2]}, out=out, resume=False)
    assert first.run_id and second.run_id and first.run_id < second.run_id  # sorts by start
    assert [r.run_id for r in read_records(out)] == [first.run_id] * 2 + [second.run_id] * 2
    assert run_sweep(point, {"m": [1]}, run_id="mine").records[0].run_id == "mine"


def test_torch_threads_apply_during_the_sweep_and_are_restored():
    before, seen = torch.get_num_threads(), []
    res = run_sweep(lambda m: seen.append(torch.get_num_threads()) or point(m), {"m": [1]},
                    device="cpu", torch_threads=1)
    assert seen == [1] and res.records[0].conditions["torch_threads"] == 1
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="torch_threads=0"):
        run_sweep(point, {"m": [1]}, torch_threads=0)


def test_noise_verdict_is_stored_with_the_record():
    def fn(m):
        times = [1.0, 1.0, 1.0, 1.0, 1.0] if m == 1 else [1.0, 3.0, 1.0, 5.0, 1.2]
        return {"throughput": 1.0, "time_ms": times}

    clean, noisy = run_sweep(fn, {"m": [1, 2]}, device="cpu").records
    assert clean.noise["noisy"] is False and clean.noise["iqr_ms"] == 0
    assert noisy.noise["noisy"] is True and noisy.noise["iqr_ms"] == pytest.approx(2.0)
    assert any("IQR" in reason for reason in noisy.noise["reasons"])
    assert run_sweep(lambda m: {"throughput": 1.0}, {"m": [1]}).records[0].noise == {}


def test_records_name_the_device_the_sweep_ran_on(monkeypatch):
    from a800lab.core import environment as env_mod

    record = run_sweep(point, {"m": [1]}, device="cpu").records[0]
    assert record.env["device"] == "cpu" and record.env["mode"] == "CPU fallback"
    assert record.env["device_name"].startswith("CPU: ")
    asked = []
    monkeypatch.setattr(env_mod.torch.cuda, "get_device_name",
                        lambda device: asked.append(device) or "NVIDIA H200")
    env = env_mod.environment("cuda:1")  # on a GPU box: the name of the device used
    assert (env["device_name"], env["mode"], asked) == ("NVIDIA H200", "GPU", ["cuda:1"])
    assert records_to_frame([record]).loc[0, "mode"] == "CPU fallback"
