"""Concurrency: N request streams sharing one device (threads with a CUDA stream each, or
processes with a CUDA context each), their throughput together, the p99 of every request, and
whether MPS is active (read, never changed).

    concurrency_point(streams=4, batch_size=8)["p99_ms"]
"""

import contextlib
import math
import multiprocessing
import queue
import threading
import time

import torch

from ...core.backends import resolve_device
from ...core.precision import matmul_precision
from ...core.sharing import mps_status
from ...core.timing import Timing, measure
from ..models.presets import preset
from .point import WARMUP_REQUESTS, Server, batch_inputs, fp32_reference
from .spec import (
    DEFAULT_REQUESTS,
    ServeRun,
    ServeSpec,
    latency_metrics,
    output_gap,
    serving_spec,
    serving_unavailable,
)

START_TIMEOUT_S = 300  # a spawned process imports torch and builds its model before the start


def mps_reading(device: str) -> dict:
    """{"mps_active": True/False (None on a CPU), "mps": one line}, read (core/sharing.py)."""
    if not device.startswith("cuda"):
        return {"mps_active": None, "mps": "no GPU: MPS does not apply"}
    status = mps_status()
    active = status["control_running"] or status["control_pipe_present"]
    return {"mps_active": active, "mps": (
        f"MPS on (pipe directory {status['pipe_directory']})" if active else
        "MPS off: the processes' contexts time-slice the GPU")}


def serve_stream(server: Server, count: int, start: threading.Barrier, device: str,
                 cancel=None) -> dict:
    """Answer `count` requests after `start`, on this thread (the server's own CUDA stream on a
    GPU), warmed on this thread first: cuBLAS handles and cuDNN caches are per thread."""
    for _ in range(WARMUP_REQUESTS):
        server.request()
    start.wait(START_TIMEOUT_S)
    began = time.monotonic()
    timing = measure(server.request, device=device, min_reps=count, max_reps=count,
                     min_warmup=0, warmup_s=0.0, flush_l2=False, cancel=cancel)
    return {"samples_ms": list(timing.samples_ms), "began": began, "ended": time.monotonic()}


def _process_stream(spec: ServeSpec, device: str, count: int, threads: int, start, results
                    ) -> None:
    """One spawned stream: its own model, warmed up, then `count` requests after `start`."""
    try:
        torch.set_num_threads(threads)
        task = preset(spec.model, spec.size)
        with matmul_precision(spec.precision):
            server = Server(spec, task, device, batch_inputs(task, spec.batch_size, device))
            server.warm_up()
            results.put(serve_stream(server, count, start, device))
    except BaseException as exc:  # noqa: B036 -- the parent reports it as the point's error
        with contextlib.suppress(threading.BrokenBarrierError):
            start.abort()
        results.put({"error": f"{type(exc).__name__}: {exc}"})


def concurrency_point(streams: int = 2, *, mode: str = "threads", task=None,
                      device: str = "auto", requests: int = DEFAULT_REQUESTS, cancel=None,
                      **fields) -> dict:
    """`streams` servers of one config (ServeSpec's `fields`) answering `requests` request
    batches in all (your `task`: threads)."""
    device = resolve_device(device)
    ServeRun(requests=requests, streams=streams, mode=mode)
    if mode == "processes" and task is not None:
        raise ValueError("mode='processes' rebuilds a preset in each process; your own model "
                         "runs in mode='threads'")
    spec = serving_spec(fields, device, task)
    reason = serving_unavailable(spec, device)
    if reason:
        raise ValueError(reason)
    task = task or preset(spec.model, spec.size)
    count = math.ceil(requests / streams)
    inputs = batch_inputs(task, spec.batch_size, device)
    with matmul_precision(spec.precision):
        first = Server(spec, task, device, inputs)
        setup = first.warm_up()
        gap = output_gap(first.request(), fp32_reference(task, inputs, device), spec.precision)
        if "outcome" in gap:
            return gap
        if mode == "threads":
            runs = _threads(first, spec, task, device, streams, count, cancel)
        else:
            del first
            runs = _processes(spec, device, streams, count)
    samples = [s for run in runs for s in run["samples_ms"]]
    wall_s = max(r["ended"] for r in runs) - min(r["began"] for r in runs)
    metrics = latency_metrics(Timing(tuple(samples), 0, device), spec.batch_size)
    return {**metrics, "throughput": spec.batch_size * len(samples) / wall_s, "wall_s": wall_s,
            **gap, **setup, **mps_reading(device)}


def _threads(first: Server, spec: ServeSpec, task, device: str, streams: int, count: int,
             cancel) -> list[dict]:
    servers = [first]
    for _ in range(streams - 1):  # built and warmed here: the streams start together
        server = Server(spec, task, device, batch_inputs(task, spec.batch_size, device))
        server.warm_up()
        servers.append(server)
    start, runs, errors = threading.Barrier(streams), [None] * streams, []

    def work(i: int) -> None:
        try:
            runs[i] = serve_stream(servers[i], count, start, device, cancel)
        except BaseException as exc:  # noqa: B036 -- raised again on the point's thread
            start.abort()
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,), name=f"a800lab-stream-{i}")
               for i in range(streams)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:  # the stream that failed first, not those its abort() broke
        raise next((e for e in errors if not isinstance(e, threading.BrokenBarrierError)),
                   errors[0])
    return runs


def _processes(spec: ServeSpec, device: str, streams: int, count: int) -> list[dict]:
    context = multiprocessing.get_context("spawn")
    start, results = context.Barrier(streams), context.Queue()
    threads = max(1, torch.get_num_threads() // streams)
    workers = [context.Process(target=_process_stream, daemon=True,
                               args=(spec, device, count, threads, start, results))
               for _ in range(streams)]
    for worker in workers:
        worker.start()
    runs, deadline = [], time.monotonic() + 2 * START_TIMEOUT_S
    try:
        while len(runs) < streams:
            try:
                runs.append(results.get(timeout=1.0))
            except queue.Empty:
                dead = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
                if dead or time.monotonic() > deadline:
                    raise RuntimeError(f"a stream's process ended with exit code {dead[0]} "
                                       "before answering" if dead else "the streams' "
                                       f"processes did not answer in {2 * START_TIMEOUT_S} s"
                                       ) from None
    finally:
        for worker in workers:
            worker.join(timeout=10)
            if worker.is_alive():
                worker.kill()
    failed = sorted((r["error"] for r in runs if "error" in r),
                    key=lambda why: why.startswith("BrokenBarrierError"))
    if failed:
        raise RuntimeError(f"a stream's process failed: {failed[0]}")
    return runs
