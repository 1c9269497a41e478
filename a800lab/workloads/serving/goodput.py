"""Goodput: the highest request rate at which a latency target holds (pXX <= target ms), found
by a search over rate that respects noise; and the M/D/1 queue the measured points are read
against.

    found = find_goodput(lambda rate: ready.offer(Arrivals(rate_rps=rate, ...)),
                         target_ms=5.0, capacity_rps=2000.0)
    found.goodput_rps, found.points        # each tried rate with its verdict
    md1_latency_ms(rate_rps=100, service_ms=4.0)   # 6.0: mean latency, one server, Poisson
"""

import math
from collections.abc import Callable
from dataclasses import dataclass, field

MEETS, MISSES, INCONCLUSIVE = "meets", "misses", "inconclusive"
START_LOAD = 0.5        # the first rate tried: half the closed-loop capacity
HIGHEST_LOAD = 1.2      # rates above 1.2x the closed-loop capacity are not tried
LOWEST_LOAD = 1 / 64    # below this a target that still fails is out of reach
RESOLUTION = 1.1        # the search stops when the bracket is narrower than 10%
MAX_POINTS = 8


def md1_latency_ms(rate_rps: float, service_ms: float) -> float:
    """Mean latency of an M/D/1 queue (Poisson arrivals, one server, a fixed service time):
    service + rho * service / (2 (1 - rho)), rho = rate x service; inf at rho >= 1."""
    rho = rate_rps * service_ms / 1e3
    return math.inf if rho >= 1 else service_ms * (1 + rho / (2 * (1 - rho)))


def verdict(point: dict, target_ms: float) -> str:
    """meets: the percentile's 95% interval lies under the target and the server kept up;
    misses: it lies over, or the server saturated; inconclusive: the target is inside it, or
    a miss on a contended CPU (other work took the point's cores: its latency is not the
    server's alone)."""
    if point.get("outcome", "ok") != "ok":
        return MISSES
    if point.get("saturated") or point["target_ci_low_ms"] > target_ms:
        return INCONCLUSIVE if point.get("contended") else MISSES
    return MEETS if point["target_ci_high_ms"] <= target_ms else INCONCLUSIVE


@dataclass
class Goodput:
    """The search's result: every rate tried (with its point and verdict), the goodput (the
    highest rate that met the target; 0 when none did) and the lowest rate above it that did
    not (None when none was tried)."""

    target_ms: float
    percentile: float
    points: list[dict] = field(default_factory=list)

    @property
    def goodput_rps(self) -> float:
        met = [p["rate_rps"] for p in self.points if p["verdict"] == MEETS]
        return max(met, default=0.0)

    @property
    def ceiling_rps(self) -> float | None:
        above = [p["rate_rps"] for p in self.points if p["verdict"] != MEETS and
                 p["rate_rps"] > self.goodput_rps]
        return min(above, default=None)

    def summary(self) -> str:
        """"goodput 1,200 requests/s (p99 <= 5 ms); 1,400 missed" in one line."""
        target = f"p{self.percentile:g} <= {self.target_ms:g} ms"
        if not self.goodput_rps:
            return f"no rate tried met {target} (lowest tried: " \
                   f"{min(p['rate_rps'] for p in self.points):.4g} requests/s)"
        above = self.ceiling_rps
        tail = "; every rate tried met it (the search stops at 1.2x the closed-loop " \
            "capacity: a lower bound)" if above is None else \
            f"; {above:.4g} requests/s {self._verdict_at(above)}"
        return f"goodput {self.goodput_rps:.4g} requests/s ({target}){tail}"

    def _verdict_at(self, rate: float) -> str:
        return next(p["verdict"] for p in self.points if p["rate_rps"] == rate)


def find_goodput(offer: Callable[[float], dict], *, target_ms: float, capacity_rps: float,
                 percentile: float = 99, max_points: int = MAX_POINTS,
                 on_point: Callable[[dict], None] | None = None) -> Goodput:
    """Offer rates to `offer(rate) -> point` (load.Prepared.offer's figures): half the
    capacity first, then up or down by factors of two to bracket the target, then halve the
    bracket (geometrically) until it is within 10% or `max_points` points were measured."""
    found = Goodput(target_ms, percentile)

    def tried(rate: float) -> str:
        point = offer(rate)
        point = {**point, "rate_rps": rate, "verdict": verdict(point, target_ms)}
        found.points.append(point)
        if on_point is not None:
            on_point(point)
        return point["verdict"]

    low, high = 0.0, None  # the highest rate that met, the lowest that did not
    rate = START_LOAD * capacity_rps
    while len(found.points) < max_points:
        if tried(rate) == MEETS:
            low = rate
        else:
            high = rate
        if high is None:  # every rate so far met: go up, to the ceiling of what is tried
            if rate >= HIGHEST_LOAD * capacity_rps:
                break
            rate = min(2 * rate, HIGHEST_LOAD * capacity_rps)
        elif low == 0.0:  # none met yet: go down
            if rate <= LOWEST_LOAD * capacity_rps:
                break
            rate /= 2
        elif high / low <= RESOLUTION:
            break
        else:
            rate = math.sqrt(low * high)
    return found
