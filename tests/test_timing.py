"""measure() logic on a fake clock: warm-up, budgeted repetitions, statistics, cancel."""

import pytest

from a800lab.core.cancel import Cancelled, CancelToken
from a800lab.core.timing import Timing, measure


class FakeClock:
    """A clock that only moves when the timed function says so."""

    def __init__(self):
        self.now_s = 100.0

    def __call__(self):
        return self.now_s


def make_fn(clock, durations_s):
    it = iter(durations_s)

    def fn():
        clock.now_s += next(it)

    return fn


def test_samples_are_the_per_call_times():
    clock = FakeClock()
    # 2 warm-up calls of 10 ms, then 5 timed calls
    fn = make_fn(clock, [0.010, 0.010, 0.001, 0.002, 0.003, 0.004, 0.005])
    t = measure(fn, device="cpu", clock=clock, min_warmup=2, warmup_s=0, budget_s=0,
                min_reps=5)
    assert t.warmup == 2
    assert t.samples_ms == pytest.approx((1, 2, 3, 4, 5))
    assert t.median_ms == pytest.approx(3)
    assert t.min_ms == pytest.approx(1)
    assert t.iqr_ms == pytest.approx(2)  # inclusive quartiles 2 and 4
    assert t.noisy  # IQR 2 ms is 67% of the 3 ms median
    assert "noisy" in t.noise_warning


def test_repetitions_follow_the_budget():
    clock = FakeClock()
    fn = make_fn(clock, [0.004] * 1000)  # 4 ms per call
    t = measure(fn, device="cpu", clock=clock, min_warmup=1, warmup_s=0.02, budget_s=0.2,
                min_reps=3, max_reps=500)
    assert t.warmup == 5  # warm-up runs until 20 ms passed
    assert len(t.samples_ms) == 50  # 200 ms budget / 4 ms per call
    assert not t.noisy


def test_repetitions_clamped_to_min_and_max():
    clock = FakeClock()
    slow = measure(make_fn(clock, [1.0] * 20), device="cpu", clock=clock, min_warmup=1,
                   warmup_s=0, budget_s=0.5, min_reps=4)
    assert len(slow.samples_ms) == 4
    fast = measure(make_fn(clock, [1e-6] * 200), device="cpu", clock=clock, min_warmup=1,
                   warmup_s=0, budget_s=10, max_reps=50)
    assert len(fast.samples_ms) == 50


def test_cancel_is_honoured_between_repetitions():
    clock, token, calls = FakeClock(), CancelToken(), []

    def fn():
        calls.append(1)
        clock.now_s += 0.001
        if len(calls) == 4:
            token.cancel()

    with pytest.raises(Cancelled):
        measure(fn, device="cpu", clock=clock, min_warmup=1, warmup_s=0, budget_s=1,
                min_reps=10, cancel=token)
    assert len(calls) == 4  # stopped right after the call that cancelled


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="min_reps"):
        measure(lambda: None, device="cpu", min_reps=0)
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        measure(lambda: None, device="tpu")


def test_real_clock_on_cpu_measures_something():
    t = measure(lambda: sum(range(1000)), device="cpu", budget_s=0.02, warmup_s=0.01)
    assert t.device == "cpu" and len(t.samples_ms) >= 5 and t.median_ms > 0


def test_single_sample_statistics_and_dict():
    t = Timing(samples_ms=(2.0,), warmup=0, device="cpu")
    assert t.iqr_ms == 0 and not t.noisy
    d = t.to_dict()
    assert d["samples_ms"] == [2.0] and d["median_ms"] == 2.0


@pytest.mark.parametrize("name", ["budget_s", "warmup_s"])
@pytest.mark.parametrize("value", [-1, float("nan"), float("inf")])
def test_budgets_must_be_finite_and_non_negative(name, value):
    with pytest.raises(ValueError, match=rf"{name}=.* must be a finite number of seconds"):
        measure(lambda: None, device="cpu", **{name: value})


class RecordingCuda:
    """A stand-in for torch.cuda that logs every call with the device current at that moment."""

    def __init__(self):
        self.log = []
        self.current = "cuda:0"

    def device(self, device):
        cuda = self

        class Guard:
            def __enter__(self):
                cuda.saved, cuda.current = cuda.current, device

            def __exit__(self, *exc):
                cuda.current = cuda.saved

        return Guard()

    def Event(self, enable_timing=False):  # noqa: N802 - torch's name
        cuda = self
        assert enable_timing

        class Event:
            def record(self):
                cuda.log.append(("record", self.name, cuda.current))

            def elapsed_time(self, end):
                cuda.log.append(("elapsed_time", self.name, cuda.current))
                return 1.5

        event = Event()
        event.name = f"event{sum(e[0] == 'new event' for e in self.log)}"
        self.log.append(("new event", event.name, self.current))
        return event

    def synchronize(self, device=None):
        self.log.append(("synchronize", device, self.current))


def test_time_cuda_orders_flush_events_and_sync_on_the_timed_device():
    from a800lab.core.timing import _time_cuda

    cuda = RecordingCuda()

    class Flush:
        def zero_(self):
            cuda.log.append(("flush", None, cuda.current))

    samples = _time_cuda(lambda: cuda.log.append(("fn", None, cuda.current)), "cuda:3", 2,
                         Flush(), None, cuda=cuda)
    assert samples == [1.5, 1.5]
    steps = [(what, name) for what, name, _ in cuda.log if what != "new event"]
    assert steps == [
        ("flush", None), ("record", "event0"), ("fn", None), ("record", "event1"),
        ("flush", None), ("record", "event2"), ("fn", None), ("record", "event3"),
        ("synchronize", "cuda:3"),
        ("elapsed_time", "event0"), ("elapsed_time", "event2")]
    # everything up to the sync happens with the timed device current
    assert {device for what, _, device in cuda.log if what != "elapsed_time"} == {"cuda:3"}
    assert cuda.current == "cuda:0"  # restored afterwards
