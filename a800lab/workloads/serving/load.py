"""The open-loop load point: requests arriving on their own clock (arrivals.py) at a dynamic
batcher in front of one server (schedule.py), each request's latency counted from its
scheduled arrival, queue and service apart; the server's outputs checked against fp32 first.

    out = load_point(model="transformer", rate_rps=400, max_batch=8, max_delay_ms=2)
    out["p99_ms"], out["queue_p99_ms"], out["service_p99_ms"], out["saturated"]
"""

import math
from dataclasses import dataclass

from ...core.backends import resolve_device
from ...core.cancel import Cancelled
from ...core.precision import matmul_precision
from ..training.models import preset
from ..training.spec import positive_int
from .arrivals import Arrivals, arrival_times, span_s
from .point import Server, batch_inputs, fp32_reference
from .schedule import DRAIN_SHARE, run_schedule, summarise
from .spec import MIN_REQUESTS, ServeSpec, output_gap, serving_size, serving_unavailable

CPU_DURATION_S, GPU_DURATION_S = 2.0, 5.0  # a point's arrival window unless given
LATE_MS = 1.0  # the loop woke this late for an arrival (p99): the generator itself lagged


def default_duration_s(device: str) -> float:
    return CPU_DURATION_S if device == "cpu" else GPU_DURATION_S


@dataclass(frozen=True)
class Batcher:
    """The dynamic batcher: at most `max_batch` requests per batch; while fewer wait, the
    oldest may be held up to `max_delay_ms` for more; `request_size` samples per request."""

    max_batch: int = 8
    max_delay_ms: float = 0.0
    request_size: int = 1

    def __post_init__(self) -> None:
        positive_int("max_batch", self.max_batch, "8")
        positive_int("request_size", self.request_size, "1")
        delay = self.max_delay_ms
        if isinstance(delay, bool) or not isinstance(delay, int | float) or \
                not math.isfinite(delay) or delay < 0:
            raise ValueError(f"max_delay_ms={delay!r} must be a number of milliseconds >= 0, "
                             "e.g. 2 (0: never hold a request)")


def schedule_for(arrivals: Arrivals):
    """(arrival times, window seconds), refused when it holds too few requests for a p99."""
    times = arrival_times(arrivals)
    if len(times) < MIN_REQUESTS:
        raise ValueError(f"{arrivals.describe()} gives {len(times)} requests; a p99 needs at "
                         f"least {MIN_REQUESTS}: raise duration_s or the rate")
    return times, span_s(arrivals, times)


def load_point(model: str = "transformer", size: str | None = None, rate_rps: float = 100.0,
               arrival: str = "poisson", burstiness: float = 1.0, trace: str | None = None,
               max_batch: int = 8, max_delay_ms: float = 0.0, duration_s: float | None = None,
               request_size: int = 1, precision: str = "fp32", compile: str = "off",
               graphs: bool = False, channels_last: bool = False, *, task=None,
               device: str = "auto", seed: int = 0, percentile: float = 99,
               cancel=None) -> dict:
    """Your `task` (else the preset `model` at `size`) behind a dynamic batcher, under
    requests arriving at `rate_rps` for `duration_s` (see Arrivals), each of `request_size`
    samples; the record's throughput is the requests/s answered."""
    device = resolve_device(device)
    batcher = Batcher(max_batch, max_delay_ms, request_size)
    arrivals = Arrivals(arrival, rate_rps, duration_s or (
        None if arrival == "trace" else default_duration_s(device)), burstiness, trace, seed)
    times, window_s = schedule_for(arrivals)
    rows = batcher.max_batch * batcher.request_size
    spec = ServeSpec(task.name if task is not None else model,
                     serving_size(model, size, device, task), rows, precision, compile,
                     graphs, channels_last)
    reason = serving_unavailable(spec, device)
    if reason:
        raise ValueError(reason)
    task = task or preset(spec.model, spec.size)
    inputs = batch_inputs(task, rows, device)
    reference = fp32_reference(task, inputs, device)
    with matmul_precision(spec.precision):
        server = Server(spec, task, device, inputs, padded=True)
        sizes = [n * batcher.request_size for n in range(1, batcher.max_batch + 1)]
        setup = server.warm_up(sizes=sizes)
        gap = output_gap(server.request(), reference, spec.precision)
        del reference, inputs
        if "outcome" in gap:
            return {**gap, **setup}
        trace = run_schedule(lambda n: server.request(n * batcher.request_size), times,
                             max_batch=batcher.max_batch,
                             max_delay_s=batcher.max_delay_ms / 1e3,
                             end_s=window_s * (1 + DRAIN_SHARE), cancel=cancel)
    if trace.cancelled:
        raise Cancelled("stopped during a load point")
    stats = summarise(trace, times, window_s=window_s, max_batch=batcher.max_batch,
                      percentile=percentile)
    late = stats["late_p99_ms"]
    reasons = [f"the load generator woke {late:.2g} ms late for 1% of arrivals (p99), more "
               f"than {LATE_MS:g} ms: latencies include its lag; fewer torch threads or a "
               "quieter machine help"] if late is not None and late > LATE_MS else []
    return {**stats, "throughput": stats["achieved_rate"], "throughput_unit": "requests/s",
            "window_s": window_s, "spread_is_noise": False, "noise_reasons": reasons,
            "padded_to": server.sizes, **gap, **setup}
