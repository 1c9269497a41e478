"""A tuned training configuration as plain-torch code to paste: valid Python (the tests run it)
that expects `make_model()`, `loss_fn(outputs, targets)` and a `loader` of micro-batches.

    print(training_snippet({"precision": "bf16", "batch_size": 64, "accum_steps": 4},
                           optimizer="adamw", lr=1e-3, device="cuda"))
"""

from __future__ import annotations

import torch

from .levers import optimizer_flags

_FP32_PRECISION_API = hasattr(torch.backends.cuda.matmul, "fp32_precision")
_AUTOCAST = {"fp16": "torch.float16", "bf16": "torch.bfloat16"}
_ATTENTION = {"math": "MATH", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
              "cudnn": "CUDNN_ATTENTION"}


def training_snippet(config: dict, *, optimizer: str, lr: float, device: str,
                     note: str = "") -> str:
    """Plain-torch code for a tuner's `config`."""
    precision, accum = config["precision"], int(config.get("accum_steps", 1))
    device_type = "cuda" if device.startswith("cuda") else "cpu"
    attention = config.get("attention", "default")
    lines = ["import contextlib", "", "import torch"]
    if config.get("checkpointing"):
        lines.append("from torch.utils.checkpoint import checkpoint")
    if attention != "default":
        lines.append("from torch.nn.attention import SDPBackend, sdpa_kernel")
    lines += ["", f"# {note}" if note else "# tuned by python -m a800lab tune train",
              f'device = "{device_type}"']
    if precision == "tf32":  # the API of the torch installed here (older ones: allow_tf32)
        lines += (['torch.backends.cuda.matmul.fp32_precision = "tf32"   # TF32 tensor cores',
                   'torch.backends.cudnn.conv.fp32_precision = "tf32"'] if _FP32_PRECISION_API
                  else ["torch.backends.cuda.matmul.allow_tf32 = True   # TF32 tensor cores",
                        "torch.backends.cudnn.allow_tf32 = True"])
    if precision == "fp32" and device_type == "cuda":  # the lab's fp32: no TF32 anywhere
        lines += (['torch.backends.cuda.matmul.fp32_precision = "ieee"',
                   'torch.backends.cudnn.conv.fp32_precision = "ieee"   # torch: TF32 convs']
                  if _FP32_PRECISION_API else
                  ["torch.backends.cuda.matmul.allow_tf32 = False",
                   "torch.backends.cudnn.allow_tf32 = False   # torch's default: TF32 convs"])
    cast = ", dtype=torch.bfloat16" if precision == "bf16_pure" else ""
    lines.append(f"model = make_model().to(device{cast})")
    if config.get("channels_last"):
        lines.append("model = model.to(memory_format=torch.channels_last)")
    if config.get("checkpointing"):
        lines += ["", "", "class Checkpointed(torch.nn.Module):",
                  '    """A block whose activations are recomputed in backward."""', "",
                  "    def __init__(self, block):", "        super().__init__()",
                  "        self.block = block", "",
                  "    def forward(self, *args):",
                  "        return checkpoint(self.block, *args, use_reentrant=False)", "", "",
                  "# each repeated block (an nn.Sequential model: wrap its children instead)",
                  "model.blocks = torch.nn.ModuleList(Checkpointed(b) for b in model.blocks)"]
    flags = "".join(f", {k}={v}" for k, v in optimizer_flags(config.get("optimizer_impl",
                                                                         "default")).items())
    if optimizer == "adamw":
        lines.append(f"optimizer = torch.optim.AdamW(model.parameters(), lr={lr:g}{flags})")
    else:
        lines.append(f"optimizer = torch.optim.SGD(model.parameters(), lr={lr:g}, "
                     f"momentum=0.9{flags})")
    mode = config.get("compile", "off")
    if mode == "off":
        lines.append("step_model = model")
    else:
        arg = "" if mode == "default" else f', mode="{mode}"'
        lines.append(f"step_model = torch.compile(model{arg})   # compiles at the first step")
    scaler = precision == "fp16"
    if scaler:
        lines.append("scaler = torch.amp.GradScaler(device)   # fp16 gradients need scaling")
    if precision in _AUTOCAST:
        context = f"torch.autocast(device, dtype={_AUTOCAST[precision]})"
    else:
        context = "contextlib.nullcontext()"
    if attention != "default":
        context += f", sdpa_kernel(SDPBackend.{_ATTENTION[attention]})"
    lines += [f"accum_steps = {accum}   # micro-batches of {config['batch_size']}: an "
              f"effective batch of {config['batch_size'] * accum}",
              "for i, (x, y) in enumerate(loader):",
              "    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)"]
    if precision == "bf16_pure":
        lines.append("    x = x.to(torch.bfloat16) if x.is_floating_point() else x")
    if config.get("channels_last"):
        lines.append("    x = x.contiguous(memory_format=torch.channels_last)")
    out = "step_model(x).float()" if precision == "bf16_pure" else "step_model(x)"
    lines += [f"    with {context}:",
              f"        loss = loss_fn({out}, y) / accum_steps   # the mean over the effective "
              "batch",
              "    scaler.scale(loss).backward()" if scaler else "    loss.backward()",
              "    if (i + 1) % accum_steps == 0:"]
    lines += (["        scaler.step(optimizer)   # skipped when the gradients hold inf/NaN",
               "        scaler.update()"] if scaler else ["        optimizer.step()"])
    lines.append("        optimizer.zero_grad(set_to_none=True)")
    return "\n".join(lines) + "\n"
