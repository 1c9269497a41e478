"""The serving lab's inference point: a model answering request batches, checked against fp32,
warmed up (compile and CUDA graph capture reported apart), then timed request by request.

    out = serve_point(model="transformer", batch_size=8, precision="bf16")
    out["p50_ms"], out["p99_ms"], out["requests"], out["throughput"]   # samples/s
"""

import contextlib
import time

import torch

from ...core.backends import resolve_device
from ...core.environment import environment, fingerprint
from ...core.precision import HALF_DTYPES, matmul_precision
from ...core.sweep import measure_point
from ...core.timing import Timing, measure
from ..models.levers import CompileWatch, compile_model, to_channels_last
from ..models.presets import Task, preset
from ..models.task import check_batch, custom_task
from .spec import (
    DEFAULT_REQUESTS,
    ServeRun,
    ServeSpec,
    build_model,
    check_serving_task,
    latency_metrics,
    model_output,
    output_gap,
    serving_spec,
    serving_unavailable,
)

WARMUP_REQUESTS = 3   # the first compiles (if anything does); a graph is captured after them
MAX_REQUESTS = 2000   # samples kept per point: enough for p99, small enough for a JSON line


def batch_inputs(task: Task, batch_size: int, device: str) -> tuple:
    """The inputs of one request batch (seeded: the same batch every call), as a tuple."""
    made = task.make_batch(batch_size, torch.Generator(device).manual_seed(0))
    inputs, _ = check_batch(made, batch_size)
    return tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)


def fp32_reference(task: Task, inputs: tuple, device: str) -> torch.Tensor:
    """The fp32 output (eager, IEEE matmuls, a fresh model) the configs are checked against."""
    with matmul_precision("fp32"), torch.inference_mode():
        model = build_model(task).eval().to(device)
        return model_output(model, inputs).float()


def buckets(max_rows: int) -> list[int]:
    """The batch sizes a padded server runs: powers of two below `max_rows`, and `max_rows`."""
    return [*(2**e for e in range(max_rows.bit_length()) if 2**e < max_rows), max_rows]


class Server:
    """One configuration ready to answer: `request(rows)` answers the first `rows` of its
    inputs (all by default). With CUDA graphs or torch.compile, a request runs padded to the
    next of `buckets(...)` (one graph, one compiled shape each) when `padded`."""

    def __init__(self, spec: ServeSpec, task: Task, device: str, inputs: tuple,
                 padded: bool = False):
        self.spec, self.device = spec, device
        self.on_cuda = device.startswith("cuda")
        dtype = HALF_DTYPES.get(spec.precision)
        model = build_model(task).eval().to(device, dtype)  # dtype None: as built
        host = tuple(x.to(dtype) if dtype is not None and x.is_floating_point() else x
                     for x in inputs)
        if spec.channels_last:
            model = model.to(memory_format=torch.channels_last)
            host = to_channels_last(host)
        self.model = compile_model(model, spec.compile)
        # on a GPU requests arrive in pinned host memory and are copied into fixed buffers
        # (a CUDA graph reads its inputs from fixed addresses), on a stream of the server's own
        self.host = tuple(x.cpu().pin_memory() for x in host) if self.on_cuda else host
        self.inputs = tuple(x.clone() for x in host) if self.on_cuda else host
        self.rows = self.inputs[0].shape[0]
        self.sizes = buckets(self.rows) if padded and (spec.graphs or spec.compile != "off") \
            else None
        self.stream = torch.cuda.Stream(device) if self.on_cuda else None
        if self.stream is not None:  # the weights and buffers were copied on the default stream
            self.stream.wait_stream(torch.cuda.current_stream(device))
        self.graphs: dict[int, tuple] = {}  # rows -> (graph, its output)

    def forward(self, rows: int) -> torch.Tensor:
        return model_output(self.model, tuple(x[:rows] for x in self.inputs))

    def run_rows(self, rows: int | None) -> int:
        """The rows a request of `rows` runs: itself, or its bucket when padded."""
        rows = self.rows if rows is None else rows
        return rows if self.sizes is None else next(s for s in self.sizes if s >= rows)

    def request(self, rows: int | None = None) -> torch.Tensor:
        """Copy the request's rows in, answer them, wait for the device; returns the output
        of those rows."""
        rows = self.rows if rows is None else rows
        run = self.run_rows(rows)
        with torch.inference_mode(), _on(self.stream):
            if self.on_cuda:
                for buffer, batch in zip(self.inputs, self.host, strict=True):
                    buffer[:run].copy_(batch[:run], non_blocking=True)
            graph = self.graphs.get(run)
            if graph is not None:
                graph[0].replay()
                out = graph[1]
            else:
                out = self.forward(run)
            if self.on_cuda:
                self.stream.synchronize()
        return out[:rows]

    def warm_up(self, requests: int = WARMUP_REQUESTS, sizes: list[int] | None = None) -> dict:
        """Warm-up requests (the first compiles), then every other size in `sizes` once; then
        the graph captures: what they cost."""
        watch, walls = CompileWatch(self.spec.compile), []
        for i in range(requests):
            started = time.perf_counter()
            self.request()
            walls.append(time.perf_counter() - started)
            if i == 0:
                watch.first_step_done()
        setup = {"first_request_ms": 1e3 * walls[0], **watch.metrics(walls)}
        others = sorted({self.run_rows(r) for r in sizes or ()} - {self.rows})
        if others:
            started = time.perf_counter()
            for rows in others:
                self.request(rows)
            setup["warm_sizes_s"] = time.perf_counter() - started
        if self.spec.graphs:
            started = time.perf_counter()
            self.capture([self.rows, *others])
            setup["capture_s"] = time.perf_counter() - started
        return setup

    def capture(self, sizes: list[int]) -> None:
        """Capture the forward at each size as a CUDA graph, the largest first, all in one
        memory pool (warmed on a side stream first, as torch asks)."""
        pool = torch.cuda.graph_pool_handle()
        with torch.inference_mode():
            for rows in sorted(sizes, reverse=True):
                self.stream.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(self.stream):
                    for _ in range(WARMUP_REQUESTS):
                        self.forward(rows)
                torch.cuda.current_stream(self.device).wait_stream(self.stream)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    output = self.forward(rows)
                self.graphs[rows] = (graph, output)
        torch.cuda.synchronize(self.device)


def _on(stream):
    """torch.cuda.stream(stream), or nothing on a CPU."""
    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


def time_requests(request, *, device: str, requests: int = DEFAULT_REQUESTS,
                  budget_s: float = 0.3, clock=time.perf_counter, cancel=None) -> Timing:
    """At least `requests` requests timed (more while `budget_s` lasts), no L2 flush."""
    ServeRun(requests=requests)
    return measure(request, device=device, budget_s=budget_s, min_reps=requests,
                   max_reps=max(requests, MAX_REQUESTS), min_warmup=1, warmup_s=0.02,
                   flush_l2=False, clock=clock, cancel=cancel)


def serve_point(*, task: Task | None = None, device: str = "auto",
                requests: int = DEFAULT_REQUESTS, budget_s: float = 0.3, cancel=None,
                **fields) -> dict:
    """One config (ServeSpec's `fields`: batch_size=8, precision="bf16", ...) of your `task`
    (else the preset `model` at `size`) answering requests."""
    device = resolve_device(device)
    spec = serving_spec(fields, device, task)
    reason = serving_unavailable(spec, device)
    if reason:
        raise ValueError(reason)
    task = task or preset(spec.model, spec.size)
    inputs = batch_inputs(task, spec.batch_size, device)
    reference = fp32_reference(task, inputs, device)
    with matmul_precision(spec.precision):  # TF32 matmuls for tf32 only
        server = Server(spec, task, device, inputs)
        setup = server.warm_up()
        gap = output_gap(server.request(), reference, spec.precision)
        del reference, inputs
        if "outcome" in gap:
            return {**gap, **setup}
        timing = time_requests(server.request, device=device, requests=requests,
                               budget_s=budget_s, cancel=cancel)
    return {**latency_metrics(timing, spec.batch_size), **gap, **setup}


def fp16_vs_fp32_latency(make_model, make_batch, *, batch_size: int = 1, device: str = "auto",
                         requests: int = DEFAULT_REQUESTS, budget_s: float = 0.5) -> dict:
    """The guide's inference case (G.9.3, "23 ms to 9 ms") on your model: per precision its
    p50/p99/quartiles, "ratio" fp32/fp16 p50 (the guide: 2.56) +- "ratio_spread", fp16's errors,
    the "records"; "outcome" and "message": the first failure's (a record's, never raised)."""
    device = resolve_device(device)
    task = custom_task(make_model, make_batch)
    check_serving_task(task, device)
    env = environment(device)
    env["fingerprint"] = fingerprint(env)

    def point(precision):
        return serve_point(task=task, batch_size=batch_size, precision=precision, device=device,
                           requests=requests, budget_s=budget_s)

    out, records = {"outcome": "ok", "message": ""}, []
    for precision in ("fp32", "fp16"):
        record = measure_point(point, {"precision": precision}, workload="serve",
                               device=device, env=env)
        records.append(record)
        timing = Timing(record.time_ms, 0, device) if record.time_ms else None
        out[precision] = {"outcome": record.outcome, "message": record.message,
                          "noisy": bool(record.noise.get("noisy")), **(
                              {"p50_ms": timing.percentile_ms(50), "p99_ms":
                               timing.percentile_ms(99), "q25_ms": timing.q25_ms,
                               "q75_ms": timing.q75_ms} if timing and record.outcome == "ok"
                              else {})}
        if record.outcome != "ok" and out["outcome"] == "ok":
            out.update(outcome=record.outcome, message=f"{precision}: {record.message}")
    fp16 = records[1].metrics
    out.update(rel_error=fp16.get("rel_error"), top1_agreement=fp16.get("top1_agreement"),
               records=records, ratio=None, ratio_spread=None)
    if out["outcome"] == "ok":
        a, b = out["fp32"], out["fp16"]
        high, low = a["q75_ms"] / b["q25_ms"], a["q25_ms"] / b["q75_ms"]
        out.update(ratio=a["p50_ms"] / b["p50_ms"], ratio_spread=(high - low) / 2)
    return out
