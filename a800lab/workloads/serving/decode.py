"""Decode: the transformer preset generating tokens from a static KV cache, time per token and
tokens/s beside the bound memory bandwidth sets (weights and cached keys and values per step).

    out = decode_point(batch_size=1, precision="bf16")  # GPU: GPT-2 small's shape; CPU: tiny
    out["ms_per_token"], out["throughput"]              # per decode step; tokens/s
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ...core.backends import resolve_device
from ...core.knobs import check_knobs, knob, on_device
from ...core.precision import HALF_DTYPES, check_supported, matmul_precision
from ...core.timing import measure
from ...core.window import outside_window
from ..models.presets import SIZES, TinyGPT, preset
from ..peak import measure_peak, roofline_peaks
from .spec import ServeSpec, output_gap

_bandwidth: dict[str, dict] = {}


def memory_bandwidth(device: str) -> dict:
    """{"measured_gbs", "datasheet_gbs"}: the copy bandwidth `a800lab peak` recorded, else one
    measured now (kept unless noisy); the datasheet's HBM figure (None on a CPU)."""
    if device not in _bandwidth:
        peaks = roofline_peaks(device, "fp32", measure_missing=False)
        measured = peaks["measured_bw_gbs"]
        if measured is None:
            report = measure_peak(device, precisions=["fp32"], size=64, budget_s=0.1)
            measured = None if "copy" in report.noisy else report.mem_bw_gbs
        found = {"measured_gbs": measured, "datasheet_gbs": peaks["mem_bw_gbs"]}
        if measured is None:
            return found
        _bandwidth[device] = found
    return _bandwidth[device]


def bounds_ms(bytes_per_step: float, bandwidth: dict) -> dict:
    """{"bound_ms_measured", "bound_ms_datasheet"}: the least time a step reading
    `bytes_per_step` takes at each bandwidth of memory_bandwidth() (None where unknown)."""
    return {f"bound_ms_{kind}": None if bandwidth[f"{kind}_gbs"] is None else
            bytes_per_step / (bandwidth[f"{kind}_gbs"] * 1e9) * 1e3
            for kind in ("measured", "datasheet")}


def cached_step(model: TinyGPT, tokens: torch.Tensor, cache: torch.Tensor,
                pos: int) -> torch.Tensor:
    """Logits of the last of `tokens` (b, t) at positions pos.., their keys and values written
    into `cache` (layers, 2, b, heads, max_len, head_dim); t > 1 only at 0."""
    b, t = tokens.shape
    h = model.embed(tokens) + model.pos[pos:pos + t]
    for layer, block in enumerate(model.blocks):
        d = h.shape[-1]
        q, k, v = block.qkv(block.norm1(h)).view(b, t, 3, block.heads, d // block.heads) \
            .permute(2, 0, 3, 1, 4)
        cache[layer, 0, :, :, pos:pos + t] = k
        cache[layer, 1, :, :, pos:pos + t] = v
        attn = F.scaled_dot_product_attention(q, cache[layer, 0, :, :, :pos + t],
                                              cache[layer, 1, :, :, :pos + t], is_causal=t > 1)
        h = h + block.proj(attn.transpose(1, 2).reshape(b, t, d))
        h = h + block.mlp(block.norm2(h))
    return model.head(model.norm(h[:, -1]))


def step_bytes(model: TinyGPT, batch_size: int, context: float, element_bytes: int) -> dict:
    """Bytes one decode step reads: the weights but the embeddings, `context` keys and values."""
    weights = sum(p.numel() for name, p in model.named_parameters()
                  if name not in ("embed.weight", "pos")) * element_bytes
    d, layers = model.norm.normalized_shape[0], len(model.blocks)
    kv = 2 * layers * batch_size * context * d * element_bytes
    return {"weight_bytes": weights, "kv_bytes": kv, "bytes_per_step": weights + kv}


@dataclass(frozen=True)
class DecodeSpec:
    """A decode point's transformer preset and lengths (GPT-2 small's on a GPU)."""

    size: str = knob("tiny", "transformer preset size", gpu="gpt2_small", cli="model_size",
                     choices=(*SIZES, "gpt2_small"), named=True)
    prompt_tokens: int = knob(8, "prompt length", unit="tokens", integer=True, lo=1,
                              example="8", gpu=128)
    new_tokens: int = knob(16, "generation length", unit="tokens", integer=True, lo=1,
                           example="16", gpu=128)

    def __post_init__(self) -> None:
        check_knobs(self)


def decode_point(size: str | None = None, batch_size: int = 1, precision: str = "fp32",
                 prompt_tokens: int | None = None, new_tokens: int | None = None, *,
                 device: str = "auto", budget_s: float = 0.3, cancel=None) -> dict:
    """`new_tokens` generated greedily after a `prompt_tokens` prompt, timed whole."""
    device = resolve_device(device)
    spec = on_device(DecodeSpec, device, size=size, prompt_tokens=prompt_tokens,
                     new_tokens=new_tokens)
    size, prompt, steps = spec.size, spec.prompt_tokens, spec.new_tokens
    precision = ServeSpec(size=size, batch_size=batch_size, precision=precision).precision
    check_supported(precision, device)
    with outside_window():  # before the point's own timing, never counted in it
        bandwidth = memory_bandwidth(device)
    task = preset("transformer", size)
    reference = task.make_model().eval().to(device)
    if prompt + steps > reference.pos.shape[0]:
        raise ValueError(f"prompt_tokens + new_tokens = {prompt + steps} exceeds the {size} "
                         f"preset's {reference.pos.shape[0]} positions")
    tokens = task.make_batch(batch_size, torch.Generator(device).manual_seed(0))[0][:, :prompt]
    dtype = HALF_DTYPES.get(precision, torch.float32)
    model = task.make_model().eval().to(device, dtype)
    heads, d = model.blocks[0].heads, model.norm.normalized_shape[0]
    cache = torch.zeros(len(model.blocks), 2, batch_size, heads, prompt + steps, d // heads,
                        device=device, dtype=dtype)
    with torch.inference_mode(), matmul_precision(precision):
        cached_step(model, tokens, cache, 0)
        following = torch.cat([tokens, tokens[:, -1:]], dim=1)
        got = cached_step(model, following[:, -1:], cache, prompt).float()
        with matmul_precision("fp32"):
            expected = reference(following)[:, -1].float()
        del reference
        gap = output_gap(got, expected, precision)
        if "outcome" in gap:
            return gap
        first = cached_step(model, tokens, cache, 0).argmax(-1, keepdim=True)

        def generate():
            token = first
            for i in range(steps):
                token = cached_step(model, token, cache, prompt + i).argmax(-1, keepdim=True)
            if device.startswith("cuda"):
                torch.cuda.current_stream(device).synchronize()

        timing = measure(generate, device=device, budget_s=budget_s, min_reps=5,
                         flush_l2=False, cancel=cancel)
    ms_per_token = timing.median_ms / steps
    read = step_bytes(model, batch_size, prompt + (steps + 1) / 2, cache.element_size())
    bounds = bounds_ms(read["bytes_per_step"], bandwidth)
    reached = bounds["bound_ms_measured"]
    return {"throughput": batch_size * steps / (timing.median_ms / 1e3),
            "throughput_unit": "tokens/s", "timing": timing, "ms_per_token": ms_per_token,
            # a request here generates new_tokens: its latency's percentiles
            "p50_ms": timing.percentile_ms(50), "p99_ms": timing.percentile_ms(99),
            **read, **bounds, **{f"bandwidth_{k}": v for k, v in bandwidth.items()},
            "pct_of_bound": None if reached is None else 100 * reached / ms_per_token,
            "prompt_tokens": prompt, "new_tokens": steps, **gap}
