"""The open-loop load generator and dynamic batcher: one scheduling loop replays a schedule of
arrival times drawn in advance against a synchronous server, and what every request met (queue,
service, latency from its *scheduled* arrival) is summarised.

    trace = run_schedule(answer, times_s, max_batch=8, max_delay_s=0.002, end_s=3.0)
    stats = summarise(trace, times_s, window_s=2.0, max_batch=8)   # p50_ms ... saturated

The batcher, as Triton Inference Server's dynamic batching: when the server is free it takes
the waiting requests, up to `max_batch`; while fewer wait it may hold the oldest up to
`max_delay_s` for more. Requests are answered in arrival order, so the queue is always the
range of arrived, unanswered requests.
"""

import math
import time
from dataclasses import dataclass, field

import numpy as np

SPIN_S = 2e-4           # the last 0.2 ms before a wake-up are spun, not slept (sleep overshoots)
DRAIN_SHARE = 0.5       # after the last arrival the backlog is served for this share of the window
GROWTH_SHARE = 0.05     # saturated: the second half's backlog grew by more than 5% of its arrivals
GROWTH_BATCHES = 2      # ... and by more than two full batches
CI_Z = 1.96             # 95% interval of a percentile, from the order statistics


@dataclass
class LoadTrace:
    """What one replay did: each batch (first request, size, start and end in seconds from the
    start) and how late the loop woke for arrivals that found the server idle."""

    batch_first: list[int] = field(default_factory=list)
    batch_size: list[int] = field(default_factory=list)
    batch_start_s: list[float] = field(default_factory=list)
    batch_end_s: list[float] = field(default_factory=list)
    late_s: list[float] = field(default_factory=list)
    ended_s: float = 0.0
    cancelled: bool = False

    @property
    def answered(self) -> int:
        return sum(self.batch_size)


def wait_until(target_s: float, start: float, clock, sleep) -> None:
    """Sleep, then spin, until `target_s` seconds after `start` on `clock`."""
    ahead = target_s - (clock() - start)
    if ahead > SPIN_S:
        sleep(ahead - SPIN_S)
    while clock() - start < target_s:
        pass


def run_schedule(answer, times_s, *, max_batch: int, max_delay_s: float, end_s: float,
                 clock=time.perf_counter, sleep=time.sleep, cancel=None) -> LoadTrace:
    """Replay `times_s` (ascending seconds) against `answer(n)`, which serves n requests and
    returns when they are done; stops once all are answered or at `end_s` (after the batch in
    flight), or at a cancel (checked between batches and wake-ups)."""
    arrivals = [float(t) for t in times_s]
    total, trace = len(arrivals), LoadTrace()
    first, admitted = 0, 0  # the queue: arrivals[first:admitted]
    start = clock()
    while first < total and not (cancel is not None and cancel.cancelled):
        now = clock() - start
        if now >= end_s:
            break
        while admitted < total and arrivals[admitted] <= now:
            admitted += 1
        waiting = admitted - first
        if waiting == 0:  # idle: sleep until the next arrival, note how late we woke
            wait_until(min(arrivals[admitted], end_s), start, clock, sleep)
            if arrivals[admitted] < end_s:
                trace.late_s.append(clock() - start - arrivals[admitted])
            continue
        if waiting < max_batch and max_delay_s > 0:
            deadline = arrivals[first] + max_delay_s
            if now < deadline:  # hold the oldest: wake at the next arrival or the deadline
                upcoming = arrivals[admitted] if admitted < total else math.inf
                wait_until(min(upcoming, deadline, end_s), start, clock, sleep)
                continue
        size = min(waiting, max_batch)
        began = clock()
        answer(size)
        ended = clock()
        trace.batch_first.append(first)
        trace.batch_size.append(size)
        trace.batch_start_s.append(began - start)
        trace.batch_end_s.append(ended - start)
        first += size
    trace.cancelled = cancel is not None and cancel.cancelled
    trace.ended_s = clock() - start
    return trace


def percentile_ci(sorted_ms: np.ndarray, q: float) -> tuple[float, float]:
    """A 95% interval of the q-th percentile from the order statistics (distribution-free;
    it assumes independent samples, so under queueing, where neighbours correlate, it is
    narrower than the truth)."""
    n = len(sorted_ms)
    p = q / 100
    half = CI_Z * math.sqrt(n * p * (1 - p))
    low = max(0, math.floor(n * p - half) - 1)
    high = min(n - 1, math.ceil(n * p + half) - 1)
    return float(sorted_ms[low]), float(sorted_ms[high])


def percentiles(values_ms, prefix: str, qs=(50, 99)) -> dict:
    """{"<prefix>p50_ms": ..., "<prefix>p99_ms": ...} of `values_ms` (None when empty)."""
    values_ms = np.asarray(values_ms, dtype=float)
    if len(values_ms) == 0:
        return {f"{prefix}p{q}_ms": None for q in qs}
    return {f"{prefix}p{q}_ms": float(np.percentile(values_ms, q)) for q in qs}


def per_request(trace: LoadTrace, count: int) -> dict[str, np.ndarray]:
    """Each answered request's batch start and end (seconds), in arrival order."""
    sizes = np.asarray(trace.batch_size, dtype=np.int64)
    return {"start_s": np.repeat(np.asarray(trace.batch_start_s), sizes)[:count],
            "end_s": np.repeat(np.asarray(trace.batch_end_s), sizes)[:count]}


def summarise(trace: LoadTrace, times_s, *, window_s: float, max_batch: int,
              percentile: float = 99) -> dict:
    """Offered and achieved rate, latency from the scheduled arrival (mean, p50/p90/p99, max,
    a 95% interval of the chosen percentile), queue and service apart, mean batch, busy share,
    late arrivals, unanswered requests and whether the server kept up (`saturated`, `why`)."""
    arrivals = np.asarray(times_s, dtype=np.float64)
    answered = trace.answered
    got = per_request(trace, answered)
    latency_s = got["end_s"] - arrivals[:answered]
    # a request still waiting at the end has waited at least this long: counted as such, so
    # an overloaded point's percentiles are lower bounds, never flattering
    waited_s = trace.ended_s - arrivals[answered:]
    latency_ms = np.sort(np.concatenate([latency_s, waited_s]) * 1e3)
    queue_ms = (got["start_s"] - arrivals[:answered]) * 1e3
    service_ms = (got["end_s"] - got["start_s"]) * 1e3
    ends = got["end_s"]
    out = {"offered_rate": len(arrivals) / window_s,
           # answered / (first arrival .. last answer): the offered rate when the server keeps
           # up (less the last requests' latency over the window), its capacity when it cannot
           "achieved_rate": answered / max(window_s, float(ends[-1]) if answered else 0.0),
           "requests": len(arrivals), "answered": answered,
           "unanswered": len(arrivals) - answered,
           "mean_ms": float(latency_ms.mean()) if len(latency_ms) else None,
           **percentiles(latency_ms, "", (50, 90, 99)),
           "max_ms": float(latency_ms[-1]) if len(latency_ms) else None,
           **percentiles(queue_ms, "queue_"), **percentiles(service_ms, "service_"),
           "queue_mean_ms": float(queue_ms.mean()) if answered else None,
           "service_mean_ms": float(service_ms.mean()) if answered else None,
           "mean_batch": answered / len(trace.batch_size) if trace.batch_size else None,
           "busy_share": float(np.sum(np.asarray(trace.batch_end_s) -
                                      np.asarray(trace.batch_start_s)) / trace.ended_s)
           if trace.ended_s > 0 else None,
           "late_p99_ms": float(np.percentile(trace.late_s, 99) * 1e3) if trace.late_s
           else None,
           "wall_s": trace.ended_s, "percentile": percentile}
    if len(latency_ms):
        out[f"p{percentile:g}_ms"] = float(np.percentile(latency_ms, percentile))
        low, high = percentile_ci(latency_ms, percentile)
        out.update(target_percentile_ms=out[f"p{percentile:g}_ms"], target_ci_low_ms=low,
                   target_ci_high_ms=high)
    out.update(saturation(arrivals, ends, window_s, max_batch, len(arrivals) - answered))
    return out


def saturation(arrivals_s: np.ndarray, ends_s: np.ndarray, window_s: float, max_batch: int,
               unanswered: int) -> dict:
    """{"saturated", "backlog_growth", "why"}: saturated when requests were still waiting at
    the end of the drain, or when the backlog (arrived, not answered) grew over the window's
    second half by more than GROWTH_SHARE of that half's arrivals and GROWTH_BATCHES batches:
    the server answered fewer than arrived, beyond what the queue's ups and downs explain."""
    half = window_s / 2

    def backlog(t: float) -> int:
        return int(np.count_nonzero(arrivals_s <= t) - np.count_nonzero(ends_s <= t))

    growth = backlog(window_s) - backlog(half)
    second_half = int(np.count_nonzero(arrivals_s > half))
    allowed = max(GROWTH_SHARE * second_half, GROWTH_BATCHES * max_batch)
    why = ""
    if unanswered:
        why = (f"{unanswered} requests still waiting {DRAIN_SHARE * window_s:.3g} s after the "
               "arrivals ended: the server answers fewer requests/s than arrive")
    elif growth > allowed:
        why = (f"the queue grew by {growth} requests over the second half of the run (of "
               f"{second_half} arrivals): the server answers fewer requests/s than arrive")
    return {"saturated": bool(why), "backlog_growth": growth, "why_saturated": why}
