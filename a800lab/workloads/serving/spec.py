"""A serving configuration, validated, and the rules every serving point shares: refusals, your
model checked for serving, its output compared with fp32, latency percentiles.

    serving_unavailable(ServeSpec(batch_size=8, precision="bf16"), "cpu")   # "" or why
    output_gap(out, reference, "bf16")    # {"rel_error": 6e-3, "top1_agreement": 0.996}
"""

from dataclasses import dataclass, replace

import torch
from torch import nn

from ...core.backends import torchvision_reason
from ...core.knobs import check_knobs, knob, knobs
from ...core.precision import parse_precision, unsupported_reason
from ...core.timing import Timing
from ..models.levers import CHANNELS_LAST, COMPILE, lever_unavailable
from ..models.presets import MODELS, SIZES, ZOO_MODELS, default_size, seeded
from ..models.task import CUSTOM, built_model, call_model, check_batch

SERVE_PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
# max |output - fp32 output| / max |fp32 output| accepted: about 10x what the presets show
# (fp16 ~1e-3, bf16 ~7e-3 on random weights); a wrong kernel is off by ~1. top-1 agreement is
# reported beside it, not judged: random-weight logits are near ties, so argmax flips easily.
ERROR_TOLERANCE = {"fp32": 1e-3, "tf32": 1e-2, "fp16": 1e-2, "bf16": 5e-2}
MIN_REQUESTS = 100      # p99 of fewer requests is the maximum of a handful
DEFAULT_REQUESTS = 200  # p99 then rests on the 2-3 slowest requests


ZOO_SIZES = tuple(size for sizes in ZOO_MODELS.values() for size in sizes)


def _zoo(names) -> tuple:  # the zoo's names where torchvision imports
    return () if torchvision_reason() else tuple(names)


def serve_precision(name) -> str:
    """The canonical name of a serving precision ("half" -> "fp16"); ValueError otherwise."""
    try:
        canonical = parse_precision(name).name
    except ValueError:
        canonical = None
    if canonical not in SERVE_PRECISIONS:
        raise ValueError(f"precision={name!r} is not a serving precision: use one of "
                         f"{', '.join(SERVE_PRECISIONS)}")
    return canonical


def serve_precisions_for(device: str) -> list[str]:
    """The serving precisions `device` can run (tf32 is CUDA only)."""
    return [p for p in SERVE_PRECISIONS if not unsupported_reason(p, device)]


@dataclass(frozen=True)
class ServeSpec:
    """One serving configuration (a bad field: ValueError saying what to give). precision:
    weights and floating inputs cast (fp16, bf16), or TF32 matmuls (tf32); graphs: the forward
    captured as a CUDA graph, replayed per request; channels_last: NHWC for an image model."""

    model: str = knob("transformer", "the model", choices=(*MODELS, *ZOO_MODELS), named=True,
                      available=lambda device: (*MODELS, *_zoo(ZOO_MODELS)))
    size: str = knob("tiny", "its size", choices=(*SIZES, "gpt2_small", *ZOO_SIZES),
                     gpu="medium", cli="model_size", named=True,
                     available=lambda device: (*SIZES, "gpt2_small", *_zoo(ZOO_SIZES)))
    batch_size: int = knob(8, "request batch", unit="samples", integer=True, lo=1, example="8",
                           scale="pow2", panel_hi=4096, tune=tuple(2**e for e in range(7)),
                           tune_gpu=tuple(2**e for e in range(9)))
    precision: str = knob("fp32", "fp32, tf32 (GPU), fp16 or bf16", canon=serve_precision,
                          available=lambda device: serve_precisions_for(device),
                          tune=("fp32", "bf16"), tune_gpu=("fp16", "bf16", "tf32", "fp32"))
    # the tuner's compile modes are opt-in: each batch size compiles anew
    compile: str = knob(replace(COMPILE, tune=("off",)))
    graphs: bool = knob(False, "capture the forward as a CUDA graph (GPU)", choices=(False, True),
                        lever=True, tune=(False,), tune_gpu=(False, True))
    channels_last: bool = knob(replace(CHANNELS_LAST, tune=(False,)))
    attention = "default"  # read by lever_unavailable; serving does not vary it

    def __post_init__(self) -> None:
        check_knobs(self)


@dataclass(frozen=True)
class ServeRun:
    """How serving points are offered and judged beside their config: requests timed, streams
    sharing the device and how, the offered load, the latency target and its percentile."""

    requests: int = knob(DEFAULT_REQUESTS, f"requests timed per point, at least ({MIN_REQUESTS} or "
                         "more)", integer=True,
                         lo=MIN_REQUESTS, example=f"{DEFAULT_REQUESTS} (a p99 of fewer than "
                         f"{MIN_REQUESTS} is the maximum of a handful)")
    streams: int = knob(2, "concurrent request streams", integer=True, lo=1, example="4",
                        scale="pow2", panel_hi=64)
    mode: str = knob("threads", "threads (own CUDA stream each) or processes (own CUDA context "
                     "each: what MPS shares)", choices=("threads", "processes"))
    load: float | None = knob(None, "offered rates as fractions of the closed-loop capacity at "
                              "the max batch, measured first in each point", lo=0,
                              example="0.5 (half the closed-loop capacity)", scale="typed",
                              panel_hi=10.0)
    p99_ms: float | None = knob(None, "the latency target", unit="ms", lo=0,
                                example="50 (milliseconds)", scale="typed", panel_hi=1e5)
    percentile: float = knob(99.0, "the latency percentile the target applies to", lo=0,
                             hi=100, bounds="()", example="99")

    def __post_init__(self) -> None:
        check_knobs(self)


def serving_unavailable(spec: ServeSpec, device: str) -> str:
    """Why `spec` cannot run on `device`, with what to use instead; "" when it can."""
    if spec.graphs and spec.compile in ("reduce-overhead", "max-autotune"):
        return (f"compile={spec.compile!r} already replays CUDA graphs: use graphs=False with "
                "it, or graphs=True with compile 'off' or 'default'")
    if spec.graphs and not device.startswith("cuda"):
        return ("graphs=True captures the forward as a CUDA graph (torch.cuda.graph), which "
                "needs a CUDA device; on a CPU leave graphs off")
    return unsupported_reason(spec.precision, device) or lever_unavailable(spec, device)


def serving_spec(fields: dict, device: str, task=None, **fixed) -> ServeSpec:
    """ServeSpec of the `fields` given (and `fixed`): your `task`'s name as the model, the size
    serving_size's."""
    model = fields.get("model", knobs(ServeSpec)["model"].default)
    return ServeSpec(**{**fields, "model": task.name if task is not None else model,
                        "size": serving_size(model, fields.get("size"), device, task), **fixed})


def serving_size(model: str, size: str | None, device: str, task=None) -> str:
    """The size given, else "custom" for your model, a zoo model's own, tiny or medium."""
    if size:
        return size
    if task is not None:
        return CUSTOM
    return ZOO_MODELS[model][0] if model in ZOO_MODELS else default_size(device)


def build_model(task) -> nn.Module:
    """task.make_model() under a fixed seed: the reference and every config hold one weights."""
    return seeded(task.make_model)


def model_output(model: nn.Module, inputs) -> torch.Tensor:
    """The tensor a model answers with (the first of a tuple or list: the logits)."""
    out = call_model(model, inputs)
    if isinstance(out, (tuple, list)) and out:
        out = out[0]
    if not isinstance(out, torch.Tensor):
        raise ValueError(f"the model returned {type(out).__name__}; serving compares a tensor "
                         "(or a tuple whose first item is one)")
    return out


def check_serving_task(task, device: str = "cpu") -> None:
    """A dry run for serving: ValueError unless the outputs for batches of 1 and 3 are (batch,
    ...) with the same other dimensions."""
    model = built_model(lambda: build_model(task)).eval().to(device)
    shapes = {}
    for batch in (1, 3):
        made = task.make_batch(batch, torch.Generator(device).manual_seed(0))
        inputs, _ = check_batch(made, batch)
        with torch.inference_mode():
            try:
                shapes[batch] = tuple(model_output(model, inputs).shape)
            except ValueError:
                raise
            except Exception as exc:
                raise ValueError(f"the model raised on a batch of {batch}: "
                                 f"{type(exc).__name__}: {exc}") from exc
        if not shapes[batch] or shapes[batch][0] != batch:
            raise ValueError(f"the model's output for a batch of {batch} has shape "
                             f"{shapes[batch]}: serving needs its first dimension to be the "
                             f"batch ({batch})")
    if shapes[1][1:] != shapes[3][1:]:
        raise ValueError(f"the model's output changes shape with the batch: {shapes[1]} for "
                         f"1, {shapes[3]} for 3; serving needs (batch, ...) with the other "
                         "dimensions fixed")


def output_gap(out: torch.Tensor, reference: torch.Tensor, precision: str) -> dict:
    """rel_error (max |out - reference| / max |reference|) and top1_agreement (None for one
    column); over the precision's tolerance also outcome "wrong" and why."""
    out = out.float()
    if out.shape != reference.shape:
        raise ValueError(f"the output has shape {tuple(out.shape)}, the fp32 reference "
                         f"{tuple(reference.shape)}")
    scale = reference.abs().max().clamp_min(torch.finfo(torch.float32).tiny)
    agree = None
    if out.dim() >= 1 and out.shape[-1] > 1:
        agree = float((out.argmax(-1) == reference.argmax(-1)).float().mean())
    gap = {"rel_error": float((out - reference).abs().max() / scale), "top1_agreement": agree}
    tol = ERROR_TOLERANCE[precision]
    if not gap["rel_error"] <= tol:  # NaN too
        gap.update(outcome="wrong", message=f"{precision} output off: max error "
                   f"{gap['rel_error']:.3g} of the fp32 output's largest value, over the "
                   f"{tol:g} tolerance; not timed")
    return gap


def latency_metrics(timing: Timing, batch_size: int) -> dict:
    """p50 / p90 / p99 of the request latencies, how many, and samples/s at the median."""
    return {"p50_ms": timing.percentile_ms(50), "p90_ms": timing.percentile_ms(90),
            "p99_ms": timing.percentile_ms(99), "requests": len(timing.samples_ms),
            "throughput": batch_size / (timing.median_ms / 1e3),
            "throughput_unit": "samples/s", "timing": timing}
