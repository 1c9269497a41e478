"""Generation under load: requests with drawn prompt and output lengths arrive on a schedule
drawn in advance (arrivals.py) at a server that decodes them greedily from a per-slot KV cache
(kv.py), batched `static`ally or `continuous`ly; time to first token, time per output token,
inter-token and end-to-end latency are counted from each request's *scheduled* arrival.

    out = generate_point(rate_rps=100, scheduler="continuous", max_batch=8,
                         prompt_tokens="4:16", output_tokens="2:40")
    out["ttft_p99_ms"], out["tpot_p50_ms"], out["tokens_per_s"], out["saturated"]

static: when the server is free it takes up to `max_batch` waiting requests, prefills them and
decodes until the longest ends (finished sequences keep their slot and are computed; new
arrivals wait for the whole batch). continuous (iteration-level, as Orca and vLLM): before
each decode step waiting requests are prefilled into free slots; a finished sequence frees its
slot at once (the active slots are kept packed, so a step costs what the active ones need).
A lengths spec is an int or "LO:HI" (uniform integers, seeded).
"""

import bisect
import functools
import math
import time
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from ...core.backends import resolve_device
from ...core.knobs import check_knobs, knob, knobs, on_device
from ...core.precision import HALF_DTYPES, check_supported, matmul_precision
from ...core.window import outside_window, timed_section
from .arrivals import Arrivals, arrival_times, span_s
from .decode import DecodeSpec, bounds_ms, memory_bandwidth
from .kv import blamed, built, check_generator, move_slot, preset_generator, source_of
from .schedule import DRAIN_SHARE, percentiles, saturation, wait_until
from .spec import MIN_REQUESTS, serve_precision

SCHEDULERS = ("static", "continuous")
MIN_GENERATIONS = 10  # percentiles of fewer requests say nothing


def token_range(name: str, spec) -> tuple[int, int]:
    """(LO, HI) of a lengths spec: an int N (N:N) or "LO:HI" with 1 <= LO <= HI."""
    lo = hi = spec
    if isinstance(spec, str):
        parts = spec.split(":")
        try:
            lo, hi = (int(parts[0]), int(parts[-1])) if len(parts) <= 2 else (None, None)
        except ValueError:
            lo = hi = None
    ok = all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi))
    if not ok or not 1 <= lo <= hi:
        raise ValueError(f"{name}={spec!r} must be a number of tokens N or a range LO:HI with "
                         "1 <= LO <= HI, e.g. 16 or 4:32")
    return lo, hi


def lengths(name: str, spec):
    """A lengths spec as given, when token_range takes it."""
    token_range(name, spec)
    return spec


@dataclass(frozen=True)
class GenerateSpec:
    """How requests are served: `scheduler` (static or continuous) with `max_batch` slots, each
    request's prompt and output lengths drawn from `prompt_tokens` and `output_tokens`; the
    preset's `size` and the offered `rate_rps` by default (the window: Arrivals' duration_s)."""

    scheduler: str = knob("continuous", "static (a batch runs until its longest request "
                          "ends) or continuous (a finished slot is refilled at the next step)",
                          choices=SCHEDULERS)
    max_batch: int = knob(8, "sequences decoded together at most", integer=True, lo=1,
                          example="8", gpu=16, scale="pow2", panel_hi=4096)
    prompt_tokens: int | str = knob("4:16", "prompt lengths: N, or LO:HI drawn uniformly",
                                    unit="tokens", gpu="32:256", canon=functools.partial(
                                        lengths, "prompt_tokens"),
                                    choices=("4:16", "8", "16:64", "32:256", "128"))
    output_tokens: int | str = knob("2:40", "tokens generated per request: N or LO:HI",
                                    unit="tokens", gpu="32:256", canon=functools.partial(
                                        lengths, "output_tokens"),
                                    choices=("2:40", "16", "1:64", "32:256", "128"))
    size: str = knob(replace(knobs(DecodeSpec)["size"], default="small"))
    rate_rps: float = knob(replace(knobs(Arrivals)["rate_rps"], gpu=20.0))

    def __post_init__(self) -> None:
        check_knobs(self)

    def fit(self, context: int, what: str) -> None:
        """ValueError when the longest request (prompt + output) exceeds `context`."""
        prompt, output = (token_range(n, getattr(self, n))[1]
                          for n in ("prompt_tokens", "output_tokens"))
        if prompt + output > context:
            raise ValueError(f"prompt_tokens up to {prompt} + output_tokens up to {output} = "
                             f"{prompt + output} tokens: longer than {what}'s context of "
                             f"{context} positions; shorten them")

    def draw(self, count: int, vocab: int, seed: int) -> tuple[list[np.ndarray], list[int]]:
        """`count` prompts (token ids) and output lengths, seeded."""
        rng = np.random.default_rng([seed, 1])
        (plo, phi), (olo, ohi) = (token_range(n, getattr(self, n))
                                  for n in ("prompt_tokens", "output_tokens"))
        prompts = [rng.integers(0, vocab, size=n) for n in rng.integers(plo, phi + 1, count)]
        return prompts, [int(n) for n in rng.integers(olo, ohi + 1, count)]


@dataclass
class GenerationTrace:
    """What one replay did: each request's token times (seconds from the start; the first
    from its prefill) and end, each decode step's rows, mean context and duration."""

    token_s: list[list[float]]
    end_s: list[float]
    step_rows: list[int] = field(default_factory=list)
    step_context: list[float] = field(default_factory=list)
    step_ms: list[float] = field(default_factory=list)
    ended_s: float = 0.0


def run_generation(gen, cache, prompts, outputs, times_s, *, scheduler: str, max_batch: int,
                   end_s: float, device: str, clock=time.perf_counter, sleep=time.sleep,
                   cancel=None) -> GenerationTrace:
    """Serve the requests (prompts: token tensors on the device, outputs: tokens to generate)
    arriving at `times_s` until all are done or `end_s` (checked between steps)."""
    times = [float(t) for t in times_s]
    total, trace = len(times), GenerationTrace([[] for _ in times], [math.nan] * len(times))
    sync = (lambda: torch.cuda.synchronize(device)) if device.startswith("cuda") else \
        (lambda: None)
    tokens = torch.zeros(max_batch, dtype=torch.long, device=device)
    request, length, left = [], [], []  # per slot 0 .. n-1: its request, tokens held, to go
    queued = 0  # the first request not yet admitted (FIFO)
    start = clock()

    def done(slot: int, at: float) -> None:
        trace.token_s[request[slot]].append(at)
        left[slot] -= 1
        if left[slot] == 0:
            trace.end_s[request[slot]] = at

    while True:
        if cancel is not None:
            cancel.raise_if_cancelled()
        now = clock() - start
        if now >= end_s:
            break
        arrived = bisect.bisect_right(times, now)
        if not request and queued == arrived:  # idle until the next arrival
            if queued == total:
                break
            wait_until(min(times[queued], end_s), start, clock, sleep)
            continue
        if scheduler == "continuous" or not request:
            while queued < arrived and len(request) < max_batch:
                slot, r = len(request), queued
                tokens[slot] = gen.prefill(cache, slot, prompts[r]).argmax(-1)
                sync()
                request.append(r)
                length.append(len(prompts[r]))
                left.append(outputs[r])
                done(slot, clock() - start)
                queued += 1
        if scheduler == "continuous":
            _pack(cache, tokens, request, length, left)
        if not any(left):  # static: the batch is over (continuous: every one ended at prefill)
            for rows in (request, length, left):
                rows.clear()
            continue
        n, began = len(request), clock()
        tokens[:n] = gen.decode(cache, tokens[:n], list(length)).argmax(-1)
        sync()
        at = clock() - start
        trace.step_ms.append((clock() - began) * 1e3)
        trace.step_rows.append(n)
        trace.step_context.append(sum(length) / n + 1)
        for slot in range(n):
            if left[slot]:  # a finished sequence in a static batch is computed, not advanced
                length[slot] += 1
                done(slot, at)
        if scheduler == "continuous":
            _pack(cache, tokens, request, length, left)
    trace.ended_s = clock() - start
    return trace


def _pack(cache, tokens, request: list, length: list, left: list) -> None:
    """Finished slots filled from the end, so the active ones are 0 .. n-1."""
    for slot in reversed(range(len(request))):
        if left[slot] == 0:
            last = len(request) - 1
            if slot != last:
                move_slot(cache, last, slot)
                tokens[slot] = tokens[last]
                for rows in (request, length, left):
                    rows[slot] = rows[last]
            for rows in (request, length, left):
                rows.pop()



def summarise_generation(trace: GenerationTrace, times_s, outputs, *, window_s: float,
                         max_batch: int) -> tuple[dict, np.ndarray]:
    """(metrics, end-to-end ms of the finished requests): latencies from the scheduled
    arrival (requests unfinished at the end count with what they had waited: lower bounds),
    tokens/s, the mean batch, `saturated`."""
    arrivals = np.asarray(times_s, float)
    ends = np.asarray(trace.end_s, float)
    finished = np.isfinite(ends)
    first = np.array([t[0] if t else trace.ended_s for t in trace.token_s])
    ttft_ms = (first - arrivals) * 1e3
    e2e_ms = (np.where(finished, ends, trace.ended_s) - arrivals) * 1e3
    many = finished & (np.asarray(outputs) > 1)
    tpot_ms = (ends[many] - first[many]) / (np.asarray(outputs)[many] - 1) * 1e3
    itl_ms = np.concatenate([np.diff(t) for t in trace.token_s if len(t) > 1] or [[]]) * 1e3
    produced = sum(len(t) for t in trace.token_s)
    last_token = max((t[-1] for t in trace.token_s if t), default=0.0)
    out = {"offered_rate": len(arrivals) / window_s,
           "achieved_rate": int(finished.sum()) / max(window_s, float(np.nanmax(ends))
                                                      if finished.any() else 0.0),
           "requests": len(arrivals), "answered": int(finished.sum()),
           "unanswered": int((~finished).sum()),
           **percentiles(ttft_ms, "ttft_"), **percentiles(tpot_ms, "tpot_"),
           **percentiles(itl_ms, "itl_"), **percentiles(e2e_ms, ""),
           "mean_ms": float(e2e_ms.mean()), "max_ms": float(e2e_ms.max()),
           "tokens_generated": produced,
           "tokens_per_s": produced / max(window_s, last_token),
           # median decode speed a user sees: 1 / TPOT
           "tokens_per_s_per_user": float(np.median(1e3 / tpot_ms)) if tpot_ms.size else None,
           "mean_batch": float(np.mean(trace.step_rows)) if trace.step_rows else None,
           "mean_context": float(np.average(trace.step_context, weights=trace.step_rows))
           if trace.step_rows else None,
           "decode_steps": len(trace.step_rows),
           **percentiles(trace.step_ms, "step_"), "wall_s": trace.ended_s}
    out.update(saturation(arrivals, ends[finished], window_s, max_batch,
                          int((~finished).sum())))
    return out, e2e_ms[finished]


def generator_context(size: str, generator=None, device: str = "cpu") -> tuple[int, str]:
    """(positions, whose) of the preset at `size` (built on the meta device: nothing
    allocated), or of your `generator`, built on `device` and run through prefills and decode
    steps once, so that its faults are one line before a sweep starts."""
    if generator is None:
        with torch.device("meta"):
            return preset_generator(size).context, f"the {size} preset"
    source = source_of(generator)
    with blamed(source):
        gen = built(generator, device, torch.float32)
        check_generator(gen, gen, "fp32", torch.float32, device)
        return int(gen.context), source


def decode_bound(gen, device: str, batch: float | None, context: float | None,
                 element_bytes: int) -> dict:
    """The time one decode step needs at least to read its bytes (the weights, the cached keys
    and values) at the measured and the datasheet memory bandwidth; None where unknown."""
    if batch is None or not callable(getattr(gen, "step_bytes", None)):
        return {"bound_ms_measured": None, "bound_ms_datasheet": None}
    with outside_window():
        bandwidth = memory_bandwidth(device)
    read = gen.step_bytes(batch, context, element_bytes)
    return {**read, **{f"bandwidth_{k}": v for k, v in bandwidth.items()},
            **bounds_ms(read["bytes_per_step"], bandwidth)}


def requests_schedule(arrival: str, rate_rps: float | None, duration_s: float | None,
                      burstiness: float, trace: str | None, seed: int, device: str):
    """(Arrivals, arrival times, window seconds): rate and duration by default the device's
    (a trace replays its own times unless given them); ValueError for too few requests."""
    as_is = arrival == "trace"
    rate = knobs(GenerateSpec)["rate_rps"].default_for(device)
    arrivals = Arrivals(arrival, rate_rps if as_is or rate_rps is not None else rate,
                        duration_s if as_is or duration_s is not None
                        else knobs(Arrivals)["duration_s"].default_for(device), burstiness,
                        trace, seed)
    times = arrival_times(arrivals)
    if len(times) < MIN_GENERATIONS:
        raise ValueError(f"{arrivals.describe()} gives {len(times)} requests; percentiles need "
                         f"at least {MIN_GENERATIONS}: raise duration_s or the rate")
    return arrivals, times, span_s(arrivals, times)


def generate_point(size: str | None = None, rate_rps: float | None = None,
                   arrival: str = "poisson", burstiness: float = 1.0, trace: str | None = None,
                   prompt_tokens: int | str | None = None, output_tokens: int | str | None = None,
                   scheduler: str = "continuous", max_batch: int | None = None,
                   duration_s: float | None = None, precision: str = "fp32", *,
                   generator=None, device: str = "auto", seed: int = 0, cancel=None) -> dict:
    """The transformer preset at `size` (or `generator`: a make_generator() callable, see
    kv.py) serving requests that arrive at `rate_rps` for `duration_s` (see Arrivals), checked
    against fp32 first; the record's throughput is output tokens/s."""
    device = resolve_device(device)
    spec = on_device(GenerateSpec, device, scheduler=scheduler, max_batch=max_batch,
                     prompt_tokens=prompt_tokens, output_tokens=output_tokens, size=size,
                     rate_rps=rate_rps)
    precision = serve_precision(precision)
    check_supported(precision, device)
    _, times, window_s = requests_schedule(arrival, rate_rps, duration_s, burstiness, trace,
                                           seed, device)
    if generator is None:
        spec.fit(*generator_context(spec.size))
    make = generator or (lambda: preset_generator(spec.size))
    source = source_of(generator)
    dtype = HALF_DTYPES.get(precision, torch.float32)
    with blamed(source):
        reference = built(make, device, torch.float32)
        context = int(reference.context)
    if generator is not None:
        spec.fit(context, source)
    with blamed(source), torch.inference_mode(), matmul_precision(precision):
        gen = built(make, device, dtype)
        gap = check_generator(gen, reference, precision, dtype, device)
        del reference
        if "outcome" in gap:
            return gap
        prompts, outputs = spec.draw(len(times), int(gen.vocab), seed)
        prompts = [torch.as_tensor(p, device=device) for p in prompts]
        cache = gen.new_cache(spec.max_batch, device, dtype)
        _warm_up(gen, cache, prompts[0], spec.max_batch)
        with timed_section():  # the window (CPU load, memory) holds the run alone
            got = run_generation(gen, cache, prompts, outputs, times,
                                 scheduler=spec.scheduler, max_batch=spec.max_batch,
                                 end_s=window_s * (1 + DRAIN_SHARE), device=device,
                                 cancel=cancel)
    stats, e2e_ms = summarise_generation(got, times, outputs, window_s=window_s,
                                         max_batch=spec.max_batch)
    bound = decode_bound(gen, device, stats["mean_batch"], stats["mean_context"],
                         torch.finfo(dtype).bits // 8)
    reasons = [f"only {len(times)} requests: a p99 rests on the slowest one or two; raise "
               "duration_s or the rate"] if len(times) < MIN_REQUESTS else []
    return {**stats, **bound, "throughput": stats["tokens_per_s"],
            "throughput_unit": "tokens/s", "time_ms": e2e_ms.tolist(), "window_s": window_s,
            "spread_is_noise": False, "noise_reasons": reasons, **gap}


def _warm_up(gen, cache, prompt, max_batch: int) -> None:
    """A prefill and a decode step at every batch the scheduler can form, untimed."""
    gen.prefill(cache, 0, prompt)
    tokens = torch.zeros(max_batch, dtype=torch.long, device=prompt.device)
    for n in range(1, max_batch + 1):
        gen.decode(cache, tokens[:n], [len(prompt)] * n)
