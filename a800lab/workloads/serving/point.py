"""The serving lab's inference point: a model answering request batches, checked against fp32,
warmed up (compile and CUDA graph capture reported apart), then timed request by request.

    out = serve_point(model="transformer", batch_size=8, precision="bf16")
    out["p50_ms"], out["p99_ms"], out["requests"], out["throughput"]   # samples/s
"""

import time

import torch

from ...core.backends import resolve_device
from ...core.environment import environment, fingerprint
from ...core.precision import matmul_precision
from ...core.sweep import measure_point
from ...core.timing import Timing, measure
from ..training.levers import CompileWatch, compile_model, to_channels_last
from ..training.models import Task, preset
from ..training.spec import HALF_DTYPES
from ..training.task import check_batch, custom_task
from .spec import (
    DEFAULT_REQUESTS,
    ServeSpec,
    build_model,
    check_requests,
    check_serving_task,
    latency_metrics,
    model_output,
    output_gap,
    serving_size,
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


class Server:
    """One configuration ready to answer: `request()` answers one request batch."""

    def __init__(self, spec: ServeSpec, task: Task, device: str, inputs: tuple):
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
        # (a CUDA graph reads its inputs from fixed addresses)
        self.host = tuple(x.cpu().pin_memory() for x in host) if self.on_cuda else host
        self.inputs = tuple(x.clone() for x in host) if self.on_cuda else host
        self.graph, self.output = None, None

    def forward(self) -> torch.Tensor:
        return model_output(self.model, self.inputs)

    def request(self) -> torch.Tensor:
        """Copy the batch in, answer it, wait for the device; returns the output."""
        with torch.inference_mode():
            if self.on_cuda:
                for buffer, batch in zip(self.inputs, self.host, strict=True):
                    buffer.copy_(batch, non_blocking=True)
            if self.graph is not None:
                self.graph.replay()
                out = self.output
            else:
                out = self.forward()
            if self.on_cuda:
                torch.cuda.current_stream(self.device).synchronize()
        return out

    def warm_up(self, requests: int = WARMUP_REQUESTS) -> dict:
        """Warm-up requests (the first compiles), then the graph capture: what they cost."""
        watch, walls = CompileWatch(self.spec.compile), []
        for i in range(requests):
            started = time.perf_counter()
            self.request()
            walls.append(time.perf_counter() - started)
            if i == 0:
                watch.first_step_done()
        setup = {"first_request_ms": 1e3 * walls[0], **watch.metrics(walls)}
        if self.spec.graphs:
            started = time.perf_counter()
            self.capture()
            setup["capture_s"] = time.perf_counter() - started
        return setup

    def capture(self) -> None:
        """Capture the forward as a CUDA graph (warmed on a side stream first, as torch asks)."""
        current = torch.cuda.current_stream(self.device)
        with torch.inference_mode():
            side = torch.cuda.Stream(self.device)
            side.wait_stream(current)
            with torch.cuda.stream(side):
                for _ in range(WARMUP_REQUESTS):
                    self.forward()
            current.wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.output = self.forward()
        torch.cuda.synchronize(self.device)
        self.graph = graph


def time_requests(request, *, device: str, requests: int = DEFAULT_REQUESTS,
                  budget_s: float = 0.3, clock=time.perf_counter, cancel=None) -> Timing:
    """At least `requests` requests timed (more while `budget_s` lasts), no L2 flush."""
    check_requests(requests)
    return measure(request, device=device, budget_s=budget_s, min_reps=requests,
                   max_reps=max(requests, MAX_REQUESTS), min_warmup=1, warmup_s=0.02,
                   flush_l2=False, clock=clock, cancel=cancel)


def serve_point(model: str = "transformer", size: str | None = None, batch_size: int = 8,
                precision: str = "fp32", compile: str = "off", graphs: bool = False,
                channels_last: bool = False, *, task: Task | None = None,
                device: str = "auto", requests: int = DEFAULT_REQUESTS, budget_s: float = 0.3,
                cancel=None) -> dict:
    """One config of your `task` (else the preset `model` at `size`) answering requests."""
    device = resolve_device(device)
    spec = ServeSpec(task.name if task is not None else model,
                     serving_size(model, size, device, task),
                     batch_size, precision, compile, graphs, channels_last)
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
