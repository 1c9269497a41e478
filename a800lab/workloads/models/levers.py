"""The kernel levers of a training step (compile mode, optimizer implementation, SDPA back end,
channels_last), each refused with the reason where the device or the model cannot use it.

    lever_unavailable(spec, "cpu")          # "" or why (and what to use instead)
    torch.optim.AdamW(params, lr=1e-3, **optimizer_flags("fused"))   # {"fused": True}
"""

import contextlib
import re
import shutil

import torch
from torch import nn

from ...core.knobs import Knob
from ...core.sweep import first_line
from .presets import MODELS, ZOO_MODELS

COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune")
OPTIMIZER_IMPLS = ("default", "for-loop", "foreach", "fused")
ATTENTION_BACKENDS = ("default", "math", "flash", "efficient", "cudnn")
# the levers a training step and a served model share (each spec declares its fields with them)
COMPILE = Knob("off", "torch.compile's mode (reduce-overhead: CUDA graphs, GPU only)",
               choices=COMPILE_MODES, lever=True)
OPTIMIZER_IMPL = Knob("default", "optimizer implementation ('default': torch picks)",
                      choices=OPTIMIZER_IMPLS, lever=True)
ATTENTION = Knob("default", "SDPA back end of the transformer", choices=ATTENTION_BACKENDS,
                 lever=True)
CHANNELS_LAST = Knob(False, "NHWC layout for a convolutional model", choices=(False, True),
                     lever=True)
ATTENTION_ENUM = {"math": "MATH", "flash": "FLASH_ATTENTION",
                   "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION"}
_CUDA_ONLY_ATTENTION = {"efficient": "the memory-efficient SDPA kernel",
                        "cudnn": "cuDNN's SDPA kernel"}
# presets whose forward calls F.scaled_dot_product_attention / takes 4-D image inputs
ATTENTION_PRESETS = ("transformer",)
IMAGE_PRESETS = ("cnn", "resnet50")


def lever_unavailable(spec, device: str) -> str:
    """Why a lever of `spec` cannot run on `device` or its preset, and what instead; "" if all
    can (the model's shapes decide a forced attention back end: Trainer.check_attention)."""
    on_cuda = device.startswith("cuda")
    preset = spec.model if spec.model in (*MODELS, *ZOO_MODELS) else None
    if spec.compile == "reduce-overhead" and not on_cuda:
        return ("compile='reduce-overhead' replays the step as CUDA graphs, which need a CUDA "
                "device; on a CPU use compile='default' or 'max-autotune'")
    if spec.compile != "off" and not on_cuda and shutil.which("g++") is None and \
            shutil.which("c++") is None:
        return (f"compile={spec.compile!r} on a CPU needs a C++ compiler for Inductor's "
                "kernels (none found on PATH): install g++, or use compile='off'")
    if spec.attention != "default":
        if preset is not None and preset not in ATTENTION_PRESETS:
            return (f"attention={spec.attention!r}: the {preset} preset has no attention; the "
                    "back end is a lever of the transformer preset (or your own model)")
        if spec.attention in _CUDA_ONLY_ATTENTION and not on_cuda:
            kernel = _CUDA_ONLY_ATTENTION[spec.attention]
            return (f"attention={spec.attention!r}: torch has {kernel} on CUDA only; on a CPU "
                    "use 'math' or 'flash'")
        if spec.attention == "cudnn" and on_cuda and \
                torch.cuda.get_device_capability(device) < (8, 0):
            return "attention='cudnn' needs an Ampere or newer GPU (sm_80+); use 'efficient'"
    if spec.channels_last and preset is not None and preset not in IMAGE_PRESETS:
        return (f"channels_last is a layout of 4-D image tensors; the {preset} preset has none "
                "(use it with the cnn preset or your own convolutional model)")
    return ""


def optimizer_flags(impl: str) -> dict:
    """The keyword arguments of torch.optim.AdamW / SGD for an implementation."""
    return {"default": {}, "for-loop": {"foreach": False}, "foreach": {"foreach": True},
            "fused": {"fused": True}}[impl]


def attention_backend(name: str):
    """The context that makes every SDPA call use back end `name` (a no-op for "default")."""
    if name == "default":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(getattr(SDPBackend, ATTENTION_ENUM[name]))


def attention_refusal(name: str, exc: BaseException, reasons: list[str]) -> ValueError:
    """The ValueError for a forced back end that refused: torch's reasons, what to use instead."""
    cleaned = (re.sub(r"\s*\(Triggered internally at [^)]*\)\.?", "", r).strip() for r in reasons)
    why = " ".join(dict.fromkeys(r for r in cleaned if r)) or first_line(exc)
    return ValueError(f"attention={name!r} cannot run this model's attention here: {why}. Use "
                      "attention='default' (torch picks per call) or another back end")


def compile_model(model: nn.Module, mode: str):
    """`model` under torch.compile in `mode` (compiled at the first call); "off": `model`."""
    if mode == "off":
        return model
    return torch.compile(model, mode=None if mode == "default" else mode)


def compiled_graph_count() -> int:
    """Graphs Dynamo has compiled in this process so far (each recompilation adds one)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def graph_break_count() -> int:
    """Graph breaks Dynamo has met in this process so far."""
    from torch._dynamo.utils import counters

    return int(sum(counters["graph_break"].values()))


def to_channels_last(x):
    """4-D tensors (and those inside tuples) in channels_last; anything else as it is."""
    if isinstance(x, torch.Tensor):
        return x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x
    if isinstance(x, (tuple, list)):
        return type(x)(to_channels_last(v) for v in x)
    return x


class CompileWatch:
    """What torch.compile did in one point (made before the first step, first_step_done() after
    it): graphs compiled, recompiles, compile_s (the first step less the later steps' median)."""

    def __init__(self, mode: str):
        self._counts = [compiled_graph_count()] if mode != "off" else []
        self._breaks = graph_break_count() if mode != "off" else 0

    def first_step_done(self) -> None:
        if self._counts:
            self._counts.append(compiled_graph_count())

    def metrics(self, step_wall_s: list[float]) -> dict:
        """compile_s, compiled_graphs, recompiles and graph_breaks; {} when not compiling."""
        if not self._counts:
            return {}
        start, after_first = self._counts[0], self._counts[-1]
        later = sorted(step_wall_s[1:])
        steady_s = later[len(later) // 2] if later else 0.0
        return {"compile_s": max(0.0, step_wall_s[0] - steady_s) if step_wall_s else None,
                "compiled_graphs": after_first - start,
                "recompiles": compiled_graph_count() - after_first,
                "graph_breaks": graph_break_count() - self._breaks}
