"""The measured window: a point's own memory peak, telemetry over the timed part, CPU load."""

import json
import subprocess
import sys

import pytest

from a800lab.core import memory as memory_mod
from a800lab.core import sweep as sweep_mod
from a800lab.core.sweep import run_sweep
from a800lab.core.timing import measure
from a800lab.core.window import PointWindow
from tests.fake_probe import FakeProbe

MIB = 2**20


def _prepare_check_then_time(probe):
    """A point like matmul_point: operands, a big float64 check freed, then measure()."""
    probe.alloc(12 * MIB)            # A and B: the workload's
    probe.alloc(300 * MIB)           # the float64 reference: the harness's
    probe.free(300 * MIB)

    def run():
        probe.alloc(4 * MIB)         # C, freed after each call
        probe.free(4 * MIB)

    t = measure(run, device="cpu", budget_s=0, warmup_s=0, min_reps=3)
    return {"throughput": 1.0, "timing": t}


def test_the_check_before_timing_is_outside_the_window():
    probe = FakeProbe(live_bytes=500 * MIB)  # what the process already held
    with PointWindow("cpu", probe=probe) as window:
        _prepare_check_then_time(probe)
    memory = window.memory()
    assert memory["peak_allocated_bytes"] == 16 * MIB  # A, B and C; not the 300 MiB check
    assert memory["baseline_allocated_bytes"] == 500 * MIB


def test_a_point_without_measure_is_windowed_whole():
    probe = FakeProbe(live_bytes=100 * MIB)
    with PointWindow("cpu", probe=probe) as window:
        probe.alloc(64 * MIB)
        probe.free(64 * MIB)
    assert window.memory()["peak_allocated_bytes"] == 64 * MIB


def test_the_sweep_records_the_workloads_own_peak(monkeypatch):
    probe = FakeProbe(live_bytes=1024 * MIB)
    monkeypatch.setattr(sweep_mod, "PointWindow",
                        lambda device, sampler=None: PointWindow(device, probe=probe))
    res = run_sweep(lambda m: _prepare_check_then_time(probe), {"m": [1, 2]}, device="cpu")
    assert [r.memory["peak_allocated_bytes"] for r in res.records] == [16 * MIB, 16 * MIB]


class RecordingSampler:
    """Stands in for TelemetrySampler: notes when it runs relative to the point's phases."""

    def __init__(self, log):
        self.log = log

    def start(self):
        self.log.append("sampler start")

    def stop(self):
        self.log.append("sampler stop")

    def summary(self):
        return {"available": True, "n_samples": 3}


def test_telemetry_covers_the_timed_part_not_the_check():
    log = []
    with PointWindow("cpu", sampler=RecordingSampler(log), probe=FakeProbe()) as window:
        log.append("float64 check")
        measure(lambda: log.append("call") if "call" not in log else None, device="cpu",
                budget_s=0, warmup_s=0, min_reps=1, min_warmup=1)
        log.append("after timing")
    # The provisional whole-point sampler is restarted when timing begins, so the last
    # (kept) sampler starts after the check and runs through the timed calls.
    last_start = max(i for i, e in enumerate(log) if e == "sampler start")
    assert log.index("float64 check") < last_start < log.index("call")
    assert log[-1] == "sampler stop" and window.telemetry() == {"available": True,
                                                                 "n_samples": 3}


REAL_CPU_PEAK = """
import json
from a800lab.core.sweep import run_sweep
from a800lab.workloads.matmul import matmul_point
res = run_sweep(matmul_point, {"m": [256, 1024]}, fixed={"n": 1024, "k": 1024,
                "precision": "fp32"}, device="cpu", torch_threads=1)
print(json.dumps([[r.outcome, r.memory["peak_rss_bytes"], r.metrics.get("operand_bytes")]
                  for r in res.records]))
"""


def test_real_cpu_peak_of_a_matmul_point_is_its_operands():
    """On Linux the resident-set window gives a per-point peak near A + B + C. RSS is the whole
    process's, so this runs in a fresh one (no threads of other tests allocating meanwhile);
    its first point also pays torch's one-time CPU set-up, so the second is judged."""
    if memory_mod.probe_for("cpu").current_bytes() is None:
        pytest.skip("no /proc/self/status on this host")
    out = subprocess.run([sys.executable, "-c", REAL_CPU_PEAK], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    (_, _, _), (outcome, peak, operands) = json.loads(out)
    assert outcome == "ok" and operands == 12 * MIB
    assert operands - 2 * MIB <= peak <= operands + 8 * MIB


def test_cpu_conditions_are_recorded_with_every_point():
    # at least 400 calls (~0.1 s), however slow a contended warm-up made the calls look
    res = run_sweep(lambda m: {"throughput": 1.0, "timing": measure(
        lambda: sum(range(20000)), device="cpu", budget_s=0.06, warmup_s=0.01, min_reps=400)},
        {"m": [1]}, device="cpu", torch_threads=1)
    conditions = res.records[0].conditions
    assert conditions["torch_threads"] == 1 and conditions["usable_cores"] >= 1
    assert conditions["window_s"] >= 0.05 and conditions["others_busy_cores"] is not None


def test_harness_work_waits_for_a_cpu_point_and_goes_first_between_points():
    import threading
    import time

    from a800lab.core.window import harness_work

    log, started = [], threading.Event()

    def point(m):
        log.append(f"point {m} start")
        started.set()
        time.sleep(0.05)
        log.append(f"point {m} end")
        return {"throughput": 1.0}

    def draw():
        started.wait()
        with harness_work():
            log.append("draw")

    drawer = threading.Thread(target=draw)
    drawer.start()
    run_sweep(point, {"m": [1, 2, 3]}, device="cpu")
    drawer.join()
    # the draw asked during point 1: it ran after point 1 ended and before point 2 started
    assert log.index("draw") == log.index("point 1 end") + 1
    assert log[log.index("draw") + 1] == "point 2 start"
