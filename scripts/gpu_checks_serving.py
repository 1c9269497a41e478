"""The serving checks of scripts/gpu_check.py: inference points with CUDA graphs and
fp16 against fp32, decode against its bandwidth bound, streams in threads and
processes (MPS read), and the tuner under a p99 target.

Each check returns (summary, details) or raises Failed; its docstring is its expectation, one
a healthy card meets.
"""

from __future__ import annotations

import tempfile

from gpu_checks_device import Failed, expect_between

DEVICE = "cuda:0"
MEDIUM = {"model": "transformer", "size": "medium", "device": DEVICE, "budget_s": 0.2}


def _ok(out: dict, what: str) -> dict:
    if out.get("outcome", "ok") != "ok":
        raise Failed(f"{what}: {out.get('outcome')}: {out.get('message')}")
    return out


def check_serving() -> tuple[str, dict]:
    """The medium Transformer in fp16 at batch 1: right against fp32 eager and as a captured
    CUDA graph (capture timed apart), the graph's p50 below eager's (batch 1 is launch-bound);
    fp16 at batch 64 faster than IEEE fp32; each point on >= 200 requests. (torch.compile on a
    GPU is the levers check's: compiling here again would not fit the lease.)"""
    from a800lab.workloads.serving.point import serve_point

    details, texts = {}, []
    keys = ("p50_ms", "p99_ms", "requests", "throughput", "rel_error", "top1_agreement",
            "first_request_ms", "capture_s")
    for name, config in (("eager", {}), ("graphs", {"graphs": True})):
        out = _ok(serve_point(**MEDIUM, batch_size=1, precision="fp16", **config), name)
        details[name] = {k: out.get(k) for k in keys}
    if details["graphs"]["capture_s"] is None or details["eager"]["requests"] < 200:
        raise Failed(f"capture not timed apart or too few requests: {details}")
    texts.append(expect_between("graph p50 / eager p50 at batch 1",
                                details["graphs"]["p50_ms"] / details["eager"]["p50_ms"],
                                0.02, 0.95))
    rates = {p: _ok(serve_point(**MEDIUM, batch_size=64, precision=p), p)["throughput"]
             for p in ("fp32", "fp16")}
    details["batch64_samples_per_s"] = rates
    texts.append(expect_between("fp16 / fp32 samples/s at batch 64", rates["fp16"] /
                                rates["fp32"], 1.3, 30))
    return "; ".join(texts), details


def check_decode() -> tuple[str, dict]:
    """GPT-2 small's shape decoding in bf16 from a static KV cache matches a full fp32
    forward; a step at batch 16 takes less than twice one at batch 1 (memory-bound: the same
    weights read for 16 sequences); batch 1 reaches 1-100% of the bound at the measured
    bandwidth, and the datasheet's bound is known for a listed card."""
    from a800lab.workloads.serving.decode import decode_point

    outs = {b: _ok(decode_point(batch_size=b, precision="bf16", device=DEVICE, budget_s=0.3),
                   f"decode batch {b}") for b in (1, 16)}
    keys = ("ms_per_token", "throughput", "bytes_per_step", "bound_ms_measured",
            "bound_ms_datasheet", "pct_of_bound", "bandwidth_measured_gbs",
            "bandwidth_datasheet_gbs", "rel_error")
    details = {b: {k: o.get(k) for k in keys} for b, o in outs.items()}
    texts = [expect_between("ms per token batch 16 / batch 1",
                            outs[16]["ms_per_token"] / outs[1]["ms_per_token"], 0.5, 2.0)]
    if outs[1]["pct_of_bound"] is None:
        raise Failed("no measured bandwidth: the copy was noisy on a GPU")
    texts.append(expect_between("batch 1 % of the measured-bandwidth bound",
                                outs[1]["pct_of_bound"], 1, 100))
    texts.append(f"datasheet bound {outs[1]['bound_ms_datasheet']} ms")
    return "; ".join(texts), details


def check_concurrency() -> tuple[str, dict]:
    """Four threads with their own CUDA streams serve the medium Transformer (fp16, batch 1)
    with at least 0.9x the samples/s of one; two spawned processes serve it too; MPS's state
    is read (True or False), never changed."""
    from a800lab.workloads.serving.concurrency import concurrency_point

    base = {k: v for k, v in MEDIUM.items() if k != "budget_s"}
    outs = {n: _ok(concurrency_point(streams=n, batch_size=1, precision="fp16", **base),
                   f"{n} streams") for n in (1, 4)}
    outs["processes"] = _ok(concurrency_point(streams=2, batch_size=1, precision="fp16",
                                              mode="processes", **base), "2 processes")
    keys = ("throughput", "p50_ms", "p99_ms", "requests", "wall_s", "mps_active", "mps")
    details = {str(n): {k: o.get(k) for k in keys} for n, o in outs.items()}
    if not isinstance(outs[1]["mps_active"], bool):
        raise Failed(f"MPS not read: {outs[1]['mps']}")
    texts = [expect_between("samples/s 4 threads / 1", outs[4]["throughput"] /
                            outs[1]["throughput"], 0.9, 8.0),
             f"2 processes: {outs['processes']['throughput']:.4g} samples/s; "
             f"{outs[1]['mps']}"]
    return "; ".join(texts), details


def check_serve_tune() -> tuple[str, dict]:
    """tune_serve on the medium Transformer (batch 1/64, fp16, graphs off/on) under a 20 ms p99
    finds a winner whose separate re-measurement meets the target, and a snippet that captures
    a CUDA graph when the winner uses one."""
    from a800lab.workloads.serving.tune import tune_serve

    with tempfile.TemporaryDirectory() as tmp:
        outcome = tune_serve(20.0, model="transformer", size="medium", device=DEVICE,
                             budget_s=0.2, out=f"{tmp}/trials.jsonl",
                             axes={"batch_size": [1, 64], "precision": ["fp16"],
                                   "graphs": [False, True]})
    if outcome.winner is None:
        raise Failed(f"no winner: {outcome.summary()}")
    if outcome.winner["graphs"] and "torch.cuda.graph(graph)" not in outcome.snippet:
        raise Failed("the winner replays a graph but the snippet captures none")
    again = outcome.remeasured
    return (f"winner {outcome.winner}: {again['samples_per_s']:.4g} samples/s, p99 "
            f"{again['p99_ms']:.3g} ms re-measured"), {
        "remeasured": again, "frontier": outcome.frontier, "summary": outcome.summary()}
