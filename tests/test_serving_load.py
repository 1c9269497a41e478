"""The serving lab under load on a CPU: arrival schedules, the open-loop loop against queueing
theory with a sleeping server (no waits for constant arrivals below capacity, M/D/1's mean at
half the capacity, saturation that returns on time, a batcher that never holds a request past
its delay plus one service), the same logic exactly on a virtual clock, goodput's search, the
load point's record and its refusals."""

import math
import time

import numpy as np
import pytest

from a800lab.workloads.serving.arrivals import Arrivals, arrival_times, read_trace
from a800lab.workloads.serving.goodput import (
    INCONCLUSIVE,
    MEETS,
    MISSES,
    find_goodput,
    md1_latency_ms,
    verdict,
)
from a800lab.workloads.serving.load import load_point
from a800lab.workloads.serving.schedule import (
    DRAIN_SHARE,
    per_request,
    percentile_ci,
    run_schedule,
    summarise,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def sleeping(service_s: float):
    """A server whose every batch takes `service_s` (the scheduler's own clock)."""
    return lambda n: time.sleep(service_s)


def replay(times, answer, *, max_batch=1, max_delay_s=0.0, window_s=None, **clock):
    window_s = window_s or float(times[-1]) + 1e-3
    trace = run_schedule(answer, times, max_batch=max_batch, max_delay_s=max_delay_s,
                         end_s=window_s * (1 + DRAIN_SHARE), **clock)
    return trace, summarise(trace, times, window_s=window_s, max_batch=max_batch)


# ---- schedules ------------------------------------------------------------------------------
def test_schedules_have_the_asked_rate_and_shape():
    poisson = arrival_times(Arrivals("poisson", 1000.0, 4.0))
    constant = arrival_times(Arrivals("constant", 1000.0, 4.0))
    bursty = arrival_times(Arrivals("gamma", 1000.0, 4.0, burstiness=3.0))
    for times in (poisson, constant, bursty):
        assert times[0] == 0 and times[-1] < 4.0 and np.all(np.diff(times) >= 0)
    assert len(constant) == 4000 and np.allclose(np.diff(constant), 1e-3)
    for times, cv in ((poisson, 1.0), (bursty, 3.0)):
        gaps = np.diff(times)
        assert len(times) == pytest.approx(4000, rel=0.15)
        assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.2)
    assert np.array_equal(poisson, arrival_times(Arrivals("poisson", 1000.0, 4.0)))  # seeded


def test_a_trace_is_replayed_or_scaled_to_a_rate(tmp_path):
    trace = tmp_path / "arrivals.txt"
    trace.write_text("# seconds\n0.5\n0.6\n\n0.9\n1.5\n")
    assert list(read_trace(str(trace))) == [0.5, 0.6, 0.9, 1.5]
    as_is = arrival_times(Arrivals("trace", None, None, trace=str(trace)))
    assert np.allclose(as_is, [0.0, 0.1, 0.4, 1.0])
    doubled = arrival_times(Arrivals("trace", 6.0, None, trace=str(trace)))  # 3/s -> 6/s
    assert np.allclose(doubled, [0.0, 0.05, 0.2, 0.5])


@pytest.mark.parametrize("fields, says", [
    ({"rate_rps": 0}, "rate_rps=0 must be a finite number > 0"),
    ({"rate_rps": -5.0}, "rate_rps=-5.0 must be"),
    ({"duration_s": 0}, "duration_s=0 must be"),
    ({"arrival": "bursty"}, "arrival='bursty' is not a choice"),
    ({"arrival": "gamma", "burstiness": 0}, "burstiness=0 must be"),
    ({"arrival": "trace"}, "needs trace=FILE"),
])
def test_bad_schedules_are_refused_in_one_line(fields, says):
    with pytest.raises(ValueError, match=says.replace("(", r"\(")) as raised:
        Arrivals(**fields)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("text, says", [
    (None, "no such file"), ("", "holds no arrival times"),
    ("0.2\n0.1\n", "line 2: 0.1 s comes before the line above"),
    ("0.1\nsoon\n", "line 2: 'soon' is not a number"), ("-1\n", "must be a time >= 0"),
])
def test_bad_traces_name_the_file_and_line(tmp_path, text, says):
    path = tmp_path / "t.txt"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ValueError, match=says) as raised:
        arrival_times(Arrivals("trace", None, None, trace=str(path)))
    assert str(path) in str(raised.value)


# ---- the loop against queueing theory, with a sleeping server -------------------------------
def test_constant_arrivals_below_capacity_wait_for_nothing():
    times = arrival_times(Arrivals("constant", 100.0, 1.0))  # every 10 ms, 2 ms of service
    trace, got = replay(times, sleeping(0.002), window_s=1.0)
    assert got["answered"] == 100 and not got["saturated"]
    waits_ms = 1e3 * (per_request(trace, 100)["start_s"] - times)
    # only the loop's own lag (a loaded machine may take its core now and then)
    assert got["queue_p50_ms"] < 0.5 and np.mean(waits_ms < 1.0) >= 0.9
    assert got["service_p50_ms"] >= 2.0


def test_poisson_at_half_the_capacity_gives_the_md1_mean():
    service_s = 0.004
    times = arrival_times(Arrivals("poisson", 0.5 / service_s, 3.0, seed=1))
    _, got = replay(times, sleeping(service_s), window_s=3.0)
    theory = md1_latency_ms(got["offered_rate"], got["service_mean_ms"])  # measured service
    assert got["mean_ms"] == pytest.approx(theory, rel=0.25)
    assert got["queue_mean_ms"] > 0.1 * got["service_mean_ms"]  # Poisson arrivals do queue


def test_a_rate_above_capacity_is_saturated_and_returns_on_time():
    times = arrival_times(Arrivals("poisson", 400.0, 1.0))  # capacity: 1 / 5 ms = 200/s
    started = time.perf_counter()
    trace, got = replay(times, sleeping(0.005), window_s=1.0)
    took_s = time.perf_counter() - started
    assert took_s < 1.0 * (1 + DRAIN_SHARE) + 0.3  # the drain's end plus one service, and slack
    assert got["saturated"] and "still waiting" in got["why_saturated"]
    assert got["unanswered"] > 0 and got["achieved_rate"] < 0.7 * got["offered_rate"]
    assert got["p99_ms"] >= 1e3 * (trace.ended_s - 1.0) * 0.5  # the waiting count, as waited


def test_the_batcher_never_holds_a_request_past_its_delay_plus_one_service():
    service_s, delay_s = 0.002, 0.003
    times = arrival_times(Arrivals("poisson", 300.0, 1.5, seed=2))
    trace, got = replay(times, sleeping(service_s), max_batch=8, max_delay_s=delay_s,
                        window_s=1.5)
    waits = per_request(trace, trace.answered)["start_s"] - times[:trace.answered]
    longest_service = max(np.subtract(trace.batch_end_s, trace.batch_start_s))
    # + the loop's wake-up lag, and a scheduler time slice on a loaded machine (the exact
    # bound: the virtual clock's test below)
    assert waits.max() <= delay_s + longest_service + 0.010
    assert got["mean_batch"] > 1.0 and not got["saturated"]


class VirtualClock:
    """Time that passes only when slept or served (and 1 us per reading, so spins end)."""

    def __init__(self):
        self.now = 0.0

    def clock(self):
        self.now += 1e-6
        return self.now

    def sleep(self, seconds):
        self.now += seconds

    def server(self, service_s):
        def answer(n):
            self.now += service_s
        return answer


def test_the_batcher_on_a_virtual_clock_holds_exactly_up_to_its_delay():
    v = VirtualClock()
    times = np.array([0.0, 0.001, 0.010, 0.0105, 0.011, 0.012, 0.013, 0.030])
    trace, got = replay(times, v.server(0.002), max_batch=4, max_delay_s=0.003,
                        window_s=0.05, clock=v.clock, sleep=v.sleep)
    # first batch: 0 and 1 ms, sent at the 3 ms deadline; the next four fill a batch at 12 ms;
    # 13 ms waits for its deadline (16 ms); 30 ms alone at 33 ms
    assert trace.batch_size == [2, 4, 1, 1]
    assert np.allclose(trace.batch_start_s, [0.003, 0.012, 0.016, 0.033], atol=2e-5)
    assert got["mean_batch"] == 2.0 and got["answered"] == 8


def test_a_stable_queue_is_not_called_saturated_and_a_growing_one_is():
    v = VirtualClock()
    calm = arrival_times(Arrivals("constant", 400.0, 2.0))  # 2.5 ms apart, 2 ms each
    assert not replay(calm, v.server(0.002), window_s=2.0, clock=v.clock,
                      sleep=v.sleep)[1]["saturated"]
    v = VirtualClock()
    full = arrival_times(Arrivals("constant", 600.0, 2.0))  # 1.67 ms apart: 20% too many
    _, got = replay(full, v.server(0.002), window_s=2.0, clock=v.clock, sleep=v.sleep)
    assert got["saturated"] and got["achieved_rate"] == pytest.approx(500, rel=0.02)


def test_a_percentile_interval_holds_the_percentile():
    values = np.sort(np.random.default_rng(0).exponential(1.0, 2000))
    low, high = percentile_ci(values, 99)
    assert low < np.percentile(values, 99) < high
    assert low > np.percentile(values, 97) and high < np.percentile(values, 100)


# ---- goodput ----------------------------------------------------------------------------------
def test_md1_mean():
    assert md1_latency_ms(0.0, 4.0) == 4.0
    assert md1_latency_ms(125.0, 4.0) == pytest.approx(6.0)  # rho 0.5: + rho D / 2(1 - rho)
    assert math.isinf(md1_latency_ms(300.0, 4.0))


def fake_offer(knee_rps: float, width_ms: float = 0.2):
    """p99 = 1 ms below the knee, growing fast above it; a fixed interval around it."""
    def offer(rate):
        p99 = 1.0 + max(0.0, rate - knee_rps) / 10
        return {"target_percentile_ms": p99, "target_ci_low_ms": p99 - width_ms,
                "target_ci_high_ms": p99 + width_ms, "saturated": rate > 1.5 * knee_rps}
    return offer


def test_goodput_brackets_the_highest_rate_that_meets():
    found = find_goodput(fake_offer(800.0), target_ms=5.0, capacity_rps=1000.0)
    edge = 838.0  # the highest rate whose interval (p99 + 0.2 ms) stays under 5 ms
    assert edge / 1.1 <= found.goodput_rps <= edge  # the search stops within 10%
    assert edge < found.ceiling_rps <= found.goodput_rps * 1.1
    assert len(found.points) <= 8 and "goodput" in found.summary()


def test_a_percentile_straddling_the_target_is_inconclusive_not_met():
    assert verdict({"target_ci_low_ms": 4.0, "target_ci_high_ms": 6.0}, 5.0) == INCONCLUSIVE
    assert verdict({"target_ci_low_ms": 3.0, "target_ci_high_ms": 4.9}, 5.0) == MEETS
    assert verdict({"target_ci_low_ms": 5.1, "target_ci_high_ms": 7.0}, 5.0) == MISSES
    assert verdict({"target_ci_low_ms": 1.0, "target_ci_high_ms": 2.0, "saturated": True},
                   5.0) == MISSES
    found = find_goodput(fake_offer(800.0, width_ms=100.0), target_ms=5.0, capacity_rps=1000.0)
    assert found.goodput_rps == 0 and all(p["verdict"] == INCONCLUSIVE for p in found.points)


def test_a_target_out_of_reach_gives_no_goodput():
    found = find_goodput(fake_offer(0.0), target_ms=0.5, capacity_rps=1000.0)
    assert found.goodput_rps == 0 and "no rate tried met" in found.summary()


# ---- the load point -------------------------------------------------------------------------
FIELDS = ("offered_rate", "achieved_rate", "mean_ms", "p50_ms", "p90_ms", "p99_ms", "max_ms",
          "queue_p50_ms", "queue_p99_ms", "service_p50_ms", "service_p99_ms", "mean_batch",
          "busy_share", "requests", "saturated")


def test_a_load_point_records_every_field():
    got = load_point(model="mlp", rate_rps=300.0, max_batch=4, max_delay_ms=1.0,
                     duration_s=0.5, device="cpu")
    assert set(FIELDS) <= set(got) and got["throughput_unit"] == "requests/s"
    assert got["rel_error"] <= 1e-3 and got["spread_is_noise"] is False
    assert got["p50_ms"] <= got["p90_ms"] <= got["p99_ms"] <= got["max_ms"]
    assert 0 < got["busy_share"] < 1 and 1 <= got["mean_batch"] <= 4


def test_load_is_a_fraction_of_the_measured_capacity():
    got = load_point(model="mlp", load=0.3, max_batch=2, duration_s=0.3, device="cpu",
                     budget_s=0.05)
    assert got["offered_rate"] == pytest.approx(0.3 * got["capacity_rps"], rel=0.3)
    assert got["closed_loop_p99_ms"] >= got["closed_loop_p50_ms"] > 0


@pytest.mark.parametrize("fields, says", [
    ({"rate_rps": 0}, "rate_rps=0 must be"), ({"max_delay_ms": -1}, "max_delay_ms=-1 must"),
    ({"burstiness": 0, "arrival": "gamma"}, "burstiness=0 must"),
    ({"arrival": "nope"}, "'nope' is not a choice"), ({"duration_s": 0}, "duration_s=0"),
    ({"max_batch": 0}, "max_batch=0 must be a positive int"),
    ({"rate_rps": 10.0, "duration_s": 1.0}, "a p99 needs at least 100"),
    ({"load": 0.5}, "give rate_rps .* or load .*, not both"), ({"rate_rps": None}, "neither"),
    ({"arrival": "trace", "trace": "/nonexistent.txt"}, "no such file"),
])
def test_bad_load_inputs_are_refused_before_a_model_is_built(fields, says, monkeypatch):
    from a800lab.workloads.serving import load

    monkeypatch.setattr(load, "prepare", lambda *a: pytest.fail("built a server"))
    with pytest.raises(ValueError, match=says) as raised:
        load_point(**{"model": "mlp", "rate_rps": 300.0, "device": "cpu", **fields})
    assert "\n" not in str(raised.value)
