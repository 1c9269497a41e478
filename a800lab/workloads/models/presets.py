"""Model presets on generated data that show learning within tens of steps: an MLP, a small
decoder-only Transformer (also at GPT-2 small's shape), a ResNet-style CNN and torchvision's
ResNet-50 (extra `a800lab[resnet]`, random weights); `model.blocks` is what checkpointing wraps.

    task = preset("transformer", "tiny")     # a Task: make_model, make_batch, loss_fn, accuracy_fn
    x, y = task.make_batch(32, generator)    # 32 samples, made on the generator's device
"""

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from ...core.backends import torchvision_reason

MODELS = ("mlp", "transformer", "cnn")
SIZES = ("tiny", "small", "medium", "large")
ZOO_MODELS = {"resnet50": ("224",)}     # models from a model zoo, and their sizes
IGNORE_INDEX = -100  # cross_entropy skips targets equal to this
_TEACHER_SEED = 1234  # fixed: the task is the same on every device and in every run

# size -> the dimensions of each preset. "tiny" runs a step in milliseconds on one CPU core;
# "medium" and "large" are for GPUs (large: ~100-200M parameters).
DIMENSIONS = {
    "mlp": {"tiny": dict(in_dim=64, hidden=128, depth=2),
            "small": dict(in_dim=256, hidden=512, depth=3),
            "medium": dict(in_dim=1024, hidden=4096, depth=4),
            "large": dict(in_dim=2048, hidden=8192, depth=6)},
    "transformer": {"tiny": dict(vocab=32, seq_len=32, d_model=32, layers=2, heads=2),
                    "small": dict(vocab=64, seq_len=64, d_model=128, layers=4, heads=4),
                    "medium": dict(vocab=256, seq_len=256, d_model=512, layers=8, heads=8),
                    "large": dict(vocab=1024, seq_len=512, d_model=1024, layers=12, heads=16),
                    # GPT-2 small's shape (Radford et al. 2019): 124M parameters with a tied
                    # head; this lab's head is untied, 163M in all
                    "gpt2_small": dict(vocab=50257, seq_len=1024, d_model=768, layers=12,
                                       heads=12)},
    "cnn": {"tiny": dict(image=16, width=8, blocks=2),
            "small": dict(image=32, width=16, blocks=4),
            "medium": dict(image=32, width=64, blocks=8),
            "large": dict(image=64, width=128, blocks=12)},
}
CLASSES = 10
# AdamW learning rates that train each size in tens of steps (small models take larger steps)
LEARNING_RATES = {"tiny": 1e-2, "small": 3e-3, "medium": 1e-3, "large": 3e-4,
                  "gpt2_small": 3e-4, "224": 1e-3}
EVAL_BATCH = {"gpt2_small": 8, "224": 32}   # held-out samples where 256 would not fit


@dataclass(frozen=True)
class Task:
    """A model factory and its data: make_model() -> nn.Module (CPU, float32); make_batch(
    batch_size, generator) -> (inputs, targets) on the generator's device; loss_fn; accuracy_fn
    (None, or answering None: no accuracy); lr: trains it in tens of steps; eval_batch: the
    held-out batch (smaller for large shapes: GPT-2 small's logits for 256 sequences: 50 GB)."""

    name: str
    make_model: Callable[[], nn.Module]
    make_batch: Callable[[int, torch.Generator], tuple]
    loss_fn: Callable
    accuracy_fn: Callable | None
    description: str = ""
    lr: float = 1e-3
    eval_batch: int = 256


def cross_entropy(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over (..., classes) logits, ignoring IGNORE_INDEX targets."""
    return F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1),
                           ignore_index=IGNORE_INDEX)


def argmax_accuracy(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Share of targets (IGNORE_INDEX aside) that the largest logit names."""
    targets = targets.reshape(-1)
    keep = targets != IGNORE_INDEX
    hits = outputs.reshape(-1, outputs.shape[-1]).argmax(-1)[keep] == targets[keep]
    return hits.float().mean()


def _teacher(*shape: int) -> torch.Tensor:
    """A fixed random tensor (same on every machine), made on the CPU."""
    g = torch.Generator().manual_seed(_TEACHER_SEED + sum(shape))
    return torch.randn(*shape, generator=g)


class MLP(nn.Module):
    """in_dim -> [Linear(hidden) + ReLU] x depth -> Linear(classes); blocks = the hidden layers."""

    def __init__(self, in_dim: int, hidden: int, depth: int, classes: int = CLASSES):
        super().__init__()
        self.inp = nn.Linear(in_dim, hidden)
        self.blocks = nn.ModuleList(nn.Sequential(nn.ReLU(), nn.Linear(hidden, hidden))
                                    for _ in range(depth - 1))
        self.out = nn.Sequential(nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
        return self.out(h)


def _mlp_task(in_dim: int, hidden: int, depth: int) -> Task:
    # Gaussian vectors classified by a fixed random teacher network
    w1, w2 = _teacher(in_dim, 32), _teacher(32, CLASSES)

    def make_batch(batch_size: int, generator: torch.Generator):
        device = generator.device
        x = torch.randn(batch_size, in_dim, generator=generator, device=device)
        y = (torch.tanh(x @ w1.to(device)) @ w2.to(device)).argmax(-1)
        return x, y

    return Task("mlp", lambda: seeded(MLP, in_dim, hidden, depth), make_batch, cross_entropy,
                argmax_accuracy, f"MLP {in_dim}-{hidden}x{depth}-{CLASSES}: teacher classes")


class Block(nn.Module):
    """Pre-norm decoder block: causal self-attention and a 4x MLP, each with a residual."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        # (b, t, 3d) -> 3 x (b, heads, t, d / heads)
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads) \
            .permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


class TinyGPT(nn.Module):
    """Token + position embeddings, decoder blocks, final LayerNorm, an untied output head."""

    def __init__(self, vocab: int, seq_len: int, d_model: int, layers: int, heads: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(seq_len, d_model) * 0.02)
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens) + self.pos[:tokens.shape[1]]
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h))


def _transformer_task(vocab: int, seq_len: int, d_model: int, layers: int, heads: int) -> Task:
    # x[t+1] = x[t-1] + 1 mod vocab: each position needs attention to the one before it
    def make_batch(batch_size: int, generator: torch.Generator):
        device = generator.device
        first = torch.randint(0, vocab, (batch_size, 2), generator=generator, device=device)
        # x[t] = x[t - 2] + 1 unrolled: x[t] = x[t % 2] + t // 2 (mod vocab), one kernel
        t = torch.arange(seq_len + 1, device=device)
        seq = (first[:, t % 2] + t // 2) % vocab
        targets = seq[:, 1:].clone()
        targets[:, 0] = IGNORE_INDEX  # x[1] is random: nothing to learn there
        return seq[:, :-1], targets

    return Task("transformer", lambda: seeded(TinyGPT, vocab, seq_len, d_model, layers, heads),
                make_batch, cross_entropy, argmax_accuracy, f"decoder d={d_model} x{layers} "
                f"layers, {seq_len} tokens: x[t+1] = x[t-1] + 1 mod {vocab}")


class BasicBlock(nn.Module):
    """conv3x3-BN-ReLU-conv3x3-BN plus the input, then ReLU (ResNet's basic block)."""

    def __init__(self, width: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.body(x))


class SmallResNet(nn.Module):
    """Stem conv (stride 2), basic blocks, global average pool, a linear classifier."""

    def __init__(self, width: int, blocks: int, classes: int = CLASSES):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, stride=2, padding=1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU())
        self.blocks = nn.ModuleList(BasicBlock(width) for _ in range(blocks))
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h.mean(dim=(2, 3)))


def _patterns(image: int):
    """make_batch for images holding one of CLASSES fixed smooth patterns under noise."""
    # smooth patterns: random 4x4 colour grids, upsampled to the image size
    templates = F.interpolate(_teacher(CLASSES, 3, 4, 4), size=(image, image), mode="bilinear",
                              align_corners=False)

    def make_batch(batch_size: int, generator: torch.Generator):
        device = generator.device
        y = torch.randint(0, CLASSES, (batch_size,), generator=generator, device=device)
        noise = torch.randn(batch_size, 3, image, image, generator=generator, device=device)
        return templates.to(device)[y] + noise, y

    return make_batch


def _cnn_task(image: int, width: int, blocks: int) -> Task:
    # batch norm, as in ResNets: accumulation is exact only without it (per-micro-batch stats)
    return Task("cnn", lambda: seeded(SmallResNet, width, blocks), _patterns(image),
                cross_entropy, argmax_accuracy, f"ResNet-style width {width} x{blocks} blocks "
                f"(batch norm), {image}x{image} patterns under noise")


def _resnet50_task(image: int = 224) -> Task:
    from torchvision.models import resnet50  # the optional extra; checked by preset()

    return Task("resnet50", lambda: seeded(lambda: resnet50(weights=None)), _patterns(image),
                cross_entropy, argmax_accuracy, f"torchvision ResNet-50 (weights=None, 1000-class "
                f"head), {image}x{image} patterns of {CLASSES} classes under noise")


def seeded(make, *args) -> nn.Module:
    """make(*args) under a fixed seed (the same weights every call), the caller's RNG intact."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return make(*args)


_BUILDERS = {"mlp": _mlp_task, "transformer": _transformer_task, "cnn": _cnn_task}


def sizes_of(model: str) -> tuple[str, ...]:
    if model in ZOO_MODELS:
        return ZOO_MODELS[model]
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}: use one of {(*MODELS, *ZOO_MODELS)}, or "
                         "give your own with make_model= and make_batch=")
    return tuple(DIMENSIONS[model])


def preset(model: str, size: str = "tiny") -> Task:
    """The Task of a preset model at a size (sizes_of)."""
    sizes = sizes_of(model)
    if size not in sizes:
        raise ValueError(f"unknown size {size!r} for {model}: use one of {sizes}"
                         + (" (tiny on a CPU)" if "tiny" in sizes else ""))
    if model in ZOO_MODELS:
        reason = torchvision_reason()
        if reason:
            raise ValueError(f"{model} comes from torchvision's model zoo: {reason}")
        task = _resnet50_task(int(size))
    else:
        task = _BUILDERS[model](**DIMENSIONS[model][size])
    return replace(task, lr=LEARNING_RATES[size], eval_batch=EVAL_BATCH.get(size, 256))


def describe_sizes() -> dict[str, dict[str, str]]:
    """model -> size -> "N params" (built on the meta device: nothing allocated)."""
    def params(model: str, size: str) -> str:
        with torch.device("meta"):
            count = sum(p.numel() for p in preset(model, size).make_model().parameters())
        return f"{count / 1e6:.3g}M params" if count >= 1e5 else f"{count / 1e3:.3g}k params"

    return {model: {size: params(model, size) for size in sizes_of(model)} for model in MODELS}


def default_size(device: str) -> str:
    """"tiny" on a CPU (a step in milliseconds), "medium" on a GPU."""
    return "tiny" if device == "cpu" else "medium"
