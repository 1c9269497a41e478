"""Sweeps: grid, callbacks, OOM and errors as data, cancel, resume, and a killed writer."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from a800lab.core import sweep as sweep_mod
from a800lab.core.cancel import CancelToken
from a800lab.core.results import read_records
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


@pytest.mark.slow
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
