"""The open-loop load point: requests arriving on their own clock (arrivals.py) at a dynamic
batcher in front of one server (schedule.py), each request's latency counted from its
scheduled arrival, queue and service apart; the server's outputs checked against fp32 first.

    out = load_point(model="transformer", rate_rps=400, max_batch=8, max_delay_ms=2)
    out["p99_ms"], out["queue_p99_ms"], out["service_p99_ms"], out["saturated"]
"""

from dataclasses import dataclass

from ...core.backends import resolve_device
from ...core.cancel import Cancelled
from ...core.knobs import check_knobs, knob, knobs
from ...core.precision import matmul_precision
from ...core.window import timed_section
from ..models.presets import preset
from .arrivals import Arrivals, arrival_times, span_s
from .point import Server, batch_inputs, fp32_reference, time_requests
from .schedule import DRAIN_SHARE, run_schedule, summarise
from .spec import MIN_REQUESTS, ServeRun, ServeSpec, output_gap, serving_spec, serving_unavailable

LATE_MS = 1.0  # the loop woke this late for an arrival (p99): the generator itself lagged


def default_duration_s(device: str) -> float:
    """A point's arrival window unless given."""
    return knobs(Arrivals)["duration_s"].default_for(device)


@dataclass(frozen=True)
class Batcher:
    """The dynamic batcher: at most `max_batch` requests per batch; while fewer wait, the
    oldest may be held up to `max_delay_ms` for more; `request_size` samples per request."""

    max_batch: int = knob(8, "the dynamic batcher's largest batch", unit="requests",
                          integer=True, lo=1, example="8", scale="pow2", panel_hi=4096,
                          tune=(1, 4, 16, 64), tune_gpu=(1, 4, 16, 64, 256))
    max_delay_ms: float = knob(0.0, "how long the batcher may hold the oldest request for "
                               "more (0: never)", unit="ms", lo=0, bounds="[",
                               example="2 (0: never hold a request)", scale="typed",
                               panel_hi=10_000.0)
    request_size: int = knob(1, "samples per request", integer=True, lo=1, example="1")

    def __post_init__(self) -> None:
        check_knobs(self)


def schedule_for(arrivals: Arrivals):
    """(arrival times, window seconds), refused when it holds too few requests for a p99."""
    times = arrival_times(arrivals)
    if len(times) < MIN_REQUESTS:
        raise ValueError(f"{arrivals.describe()} gives {len(times)} requests; a p99 needs at "
                         f"least {MIN_REQUESTS}: raise duration_s or the rate")
    return times, span_s(arrivals, times)


@dataclass
class Prepared:
    """A server ready for load: built, warmed at every size its batcher forms, its output
    checked against fp32 (`gap`), what warming cost (`setup`)."""

    server: Server
    batcher: Batcher
    setup: dict
    gap: dict

    @property
    def wrong(self) -> bool:
        return "outcome" in self.gap

    def capacity(self, device: str, budget_s: float = 0.3, cancel=None) -> dict:
        """The closed-loop capacity: full batches back to back (requests/s) and their
        service p50 / p99 (ms)."""
        rows = self.batcher.max_batch * self.batcher.request_size
        timing = time_requests(lambda: self.server.request(rows), device=device,
                               requests=MIN_REQUESTS, budget_s=budget_s, cancel=cancel)
        return {"capacity_rps": self.batcher.max_batch / (timing.median_ms / 1e3),
                "closed_loop_p50_ms": timing.percentile_ms(50),
                "closed_loop_p99_ms": timing.percentile_ms(99)}

    def offer(self, arrivals: Arrivals, percentile: float = 99, cancel=None) -> dict:
        """The server under `arrivals`: summarise()'s figures and the generator's own lag."""
        times, window_s = schedule_for(arrivals)
        size = self.batcher.request_size
        with matmul_precision(self.server.spec.precision), timed_section():
            trace = run_schedule(lambda n: self.server.request(n * size), times,
                                 max_batch=self.batcher.max_batch,
                                 max_delay_s=self.batcher.max_delay_ms / 1e3,
                                 end_s=window_s * (1 + DRAIN_SHARE), cancel=cancel)
        if trace.cancelled:
            raise Cancelled("stopped during a load point")
        stats = summarise(trace, times, window_s=window_s, max_batch=self.batcher.max_batch,
                          percentile=percentile)
        late = stats["late_p99_ms"]
        reasons = [f"the load generator woke {late:.2g} ms late for 1% of arrivals (p99), "
                   f"more than {LATE_MS:g} ms: latencies include its lag; fewer torch threads "
                   "or a quieter machine help"] if late is not None and late > LATE_MS else []
        return {**stats, "throughput": stats["achieved_rate"], "throughput_unit": "requests/s",
                "window_s": window_s, "spread_is_noise": False, "noise_reasons": reasons,
                "padded_to": self.server.sizes}


def prepare(spec: ServeSpec, batcher: Batcher, task, device: str) -> Prepared:
    """Build `spec`'s server for `batcher` (its largest batch: max_batch x request_size rows),
    check its output against fp32 and warm every size the batcher can form."""
    reason = serving_unavailable(spec, device)
    if reason:
        raise ValueError(reason)
    rows = batcher.max_batch * batcher.request_size
    inputs = batch_inputs(task, rows, device)
    reference = fp32_reference(task, inputs, device)
    with matmul_precision(spec.precision):
        server = Server(spec, task, device, inputs, padded=True)
        sizes = [n * batcher.request_size for n in range(1, batcher.max_batch + 1)]
        setup = server.warm_up(sizes=sizes)
        gap = output_gap(server.request(), reference, spec.precision)
    return Prepared(server, batcher, setup, gap)


def load_point(rate_rps: float | None = None, arrival: str = "poisson",
               burstiness: float = 1.0, trace: str | None = None, max_batch: int = 8,
               max_delay_ms: float = 0.0, duration_s: float | None = None,
               request_size: int = 1, load: float | None = None, *, task=None,
               device: str = "auto", seed: int = 0, percentile: float = 99,
               budget_s: float = 0.3, cancel=None, **fields) -> dict:
    """Your `task` (else the preset `model` at `size`; ServeSpec's `fields`: precision,
    levers) behind a dynamic batcher, under requests arriving at `rate_rps` (or at `load` x
    the closed-loop capacity, measured first) for `duration_s` (see Arrivals), each of
    `request_size` samples; the record's throughput is the requests/s answered."""
    device = resolve_device(device)
    if (rate_rps is None) == (load is None) and arrival != "trace":
        raise ValueError(f"give rate_rps (requests/s) or load (a fraction of the closed-loop "
                         f"capacity, e.g. 0.5), not {'both' if load is not None else 'neither'}")
    ServeRun(load=load)
    batcher = Batcher(max_batch, max_delay_ms, request_size)
    window = duration_s if duration_s is not None or arrival == "trace" else \
        default_duration_s(device)
    planned = Arrivals(arrival, 1.0 if rate_rps is None and arrival != "trace" else rate_rps,
                       window, burstiness, trace, seed)  # refused before the server is built
    if rate_rps is not None or arrival == "trace":
        schedule_for(planned)
    spec = serving_spec(fields, device, task,
                        batch_size=batcher.max_batch * batcher.request_size)
    ready = prepare(spec, batcher, task or preset(spec.model, spec.size), device)
    if ready.wrong:
        return {**ready.gap, **ready.setup}
    closed = ready.capacity(device, budget_s, cancel) if load is not None else {}
    if load is not None:
        rate_rps = load * closed["capacity_rps"]
    got = ready.offer(Arrivals(arrival, rate_rps, window, burstiness, trace, seed),
                      percentile, cancel)
    return {**got, **closed, **ready.gap, **ready.setup}
