"""When requests arrive: a schedule of arrival times drawn before a load point runs (Poisson,
constant, gamma with a burstiness, or a trace file replayed), so that a slow server can never
slow its clients down (no coordinated omission).

    times_s = arrival_times(Arrivals(rate_rps=500, duration_s=2.0))           # Poisson
    times_s = arrival_times(Arrivals("gamma", 500, 2.0, burstiness=3.0))     # bursty
    times_s = arrival_times(Arrivals("trace", None, None, trace="arrivals.txt"))
"""

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...core.knobs import knob, knobs

ARRIVALS = ("poisson", "constant", "gamma", "trace")
MAX_ARRIVALS = 2_000_000  # a schedule's length: 20,000 requests/s for 100 s


@dataclass(frozen=True)
class Arrivals:
    """A schedule: `arrival` kind, mean `rate_rps` (requests/s) over `duration_s` seconds.
    gamma: inter-arrival times with coefficient of variation `burstiness` (1: Poisson; 3:
    bursts and lulls). trace: `trace`'s times (seconds, one per line, ascending), replayed as
    they are, or scaled to `rate_rps` when it is given; cut at `duration_s` when given."""

    arrival: str = knob("poisson", "how requests arrive (gamma: with a burstiness; trace: a "
                        "file's times)", choices=ARRIVALS)
    rate_rps: float | None = knob(100.0, "offered request rate", unit="requests/s", lo=0,
                                  example="100 (requests/s)", cli="rate", scale="typed",
                                  panel_hi=1e7)
    duration_s: float | None = knob(2.0, "arrivals per point (the backlog is then served for "
                                    "half as long at most)", unit="s", lo=0, example="2.0",
                                    gpu=5.0, scale="typed", panel_hi=3600.0)
    burstiness: float = knob(1.0, "gamma arrivals' coefficient of variation (1: Poisson, 3: "
                             "bursty)", lo=0,
                             example="1 (Poisson) or 3 (bursty)", scale="typed", panel_hi=100.0)
    trace: str | None = knob(None, "arrival times in seconds, one per line, replayed (a rate "
                             "scales it)", canon=str)
    seed: int = 0

    def __post_init__(self) -> None:
        for name, declared in knobs(self).items():  # a trace may leave rate and duration open
            value = getattr(self, name)
            if value is not None or declared.default is not None and self.arrival != "trace":
                object.__setattr__(self, name, declared.check(name, value))
        if self.arrival == "trace":
            if not self.trace:
                raise ValueError("arrival='trace' needs trace=FILE: arrival times in seconds, "
                                 "one per line")
            return
        if self.trace:
            raise ValueError(f"trace={self.trace!r} is replayed only with arrival='trace'")
        expected = self.rate_rps * self.duration_s
        if expected > MAX_ARRIVALS:
            raise ValueError(f"rate_rps x duration_s = {expected:.3g} requests: more than "
                             f"{MAX_ARRIVALS:,} in one point; shorten duration_s")

    def describe(self) -> str:
        """"poisson at 500 requests/s for 2 s" (for progress lines and captions)."""
        kind = f"gamma (burstiness {self.burstiness:g})" if self.arrival == "gamma" else \
            f"trace {Path(self.trace).name}" if self.arrival == "trace" else self.arrival
        rate = "" if self.rate_rps is None else f" at {self.rate_rps:g} requests/s"
        span = "" if self.duration_s is None else f" for {self.duration_s:g} s"
        return kind + rate + span


def read_trace(path: str) -> np.ndarray:
    """A trace file's arrival times (seconds, one per line; blank lines and # comments
    skipped): ValueError naming the file and line when missing, empty, not numbers, negative
    or not ascending."""
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"trace {path}: no such file; give a text file of arrival times in "
                         "seconds, one per line")
    times = []
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            t = float(text)
        except ValueError:
            raise ValueError(f"trace {path}, line {number}: {text!r} is not a number of "
                             "seconds") from None
        if not math.isfinite(t) or t < 0:
            raise ValueError(f"trace {path}, line {number}: {text!r} must be a time >= 0 s")
        if times and t < times[-1]:
            raise ValueError(f"trace {path}, line {number}: {t:g} s comes before the line "
                             f"above ({times[-1]:g} s); sort the file (sort -g)")
        times.append(t)
    if not times:
        raise ValueError(f"trace {path} holds no arrival times; give one time in seconds per "
                         "line")
    if len(times) > MAX_ARRIVALS:
        raise ValueError(f"trace {path} holds {len(times):,} arrivals: more than "
                         f"{MAX_ARRIVALS:,} in one point; split it")
    return np.asarray(times, dtype=np.float64)


def arrival_times(spec: Arrivals) -> np.ndarray:
    """The schedule: ascending arrival times in seconds from the start, all < duration."""
    if spec.arrival == "trace":
        times = read_trace(spec.trace)
        times = times - times[0]
        if spec.rate_rps is not None and len(times) > 1:
            times = times * ((len(times) - 1) / times[-1] / spec.rate_rps if times[-1] > 0
                             else 1.0)
        if spec.duration_s is not None:
            times = times[times < spec.duration_s]
        return times
    rng = np.random.default_rng(spec.seed)
    mean_gap_s = 1.0 / spec.rate_rps
    count = int(spec.rate_rps * spec.duration_s * 1.2 + 10 * math.sqrt(
        spec.rate_rps * spec.duration_s) + 10)  # enough gaps to pass the duration
    if spec.arrival == "constant":
        return np.arange(0.0, spec.duration_s, mean_gap_s)
    shape = 1.0 if spec.arrival == "poisson" else 1.0 / spec.burstiness**2
    while True:
        gaps = rng.gamma(shape, mean_gap_s / shape, size=count)
        times = np.cumsum(gaps) - gaps[0]  # the first request at t = 0
        if times[-1] >= spec.duration_s:
            return times[times < spec.duration_s]
        count *= 2  # very bursty gamma: a long lull used up the gaps drawn


def span_s(spec: Arrivals, times: np.ndarray) -> float:
    """The arrival window's length: duration_s, else (a trace) its last arrival plus one mean
    gap."""
    if spec.duration_s is not None:
        return spec.duration_s
    if len(times) < 2:
        return 1.0
    return float(times[-1] * len(times) / (len(times) - 1))
