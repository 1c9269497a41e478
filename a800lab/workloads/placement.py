"""Placement: a large embedding table on the CPU and the dense layers on the GPU, against
everything on the GPU, measured (the bytes crossing counted from the tensors that crossed): a
recommender's EmbeddingBag and an MLP, or the guide's case (G.5.5), a Transformer language
model's token embedding on the CPU and its Transformer layers on the GPU, its activations
crossing through fresh pageable memory or through pinned buffers allocated once and reused.

    placement_point("embedding_on_cpu", num_rows=10_000_000, dim=128, device="cuda")
    lm_placement_point("embedding_on_cpu", staging="reused", size="gpt2_small", device="cuda")
"""

import torch
from torch import nn

from ..core.checks import positive_int
from ..core.timing import measure
from .models.presets import preset, sizes_of

PLACEMENTS = ("all_on_device", "embedding_on_cpu")
STAGING = ("fresh", "reused")   # the split's crossings: new pageable tensors, or reused pinned


class Crossings:
    """Bytes moved between host and device, counted as they move."""

    def __init__(self) -> None:
        self.bytes = 0

    def move(self, tensor: torch.Tensor, device: str) -> torch.Tensor:
        moved = tensor.to(device, non_blocking=True)
        if moved.device != tensor.device:
            self.bytes += tensor.numel() * tensor.element_size()
        return moved

    def count_gradient(self, tensor: torch.Tensor, device: str) -> None:
        if torch.device(device) != tensor.device:
            tensor.register_hook(self._count)

    def _count(self, grad: torch.Tensor) -> None:
        self.bytes += grad.numel() * grad.element_size()


def _measured(step, crossings: Crossings, batch_size: int, device: str, budget_s: float) -> dict:
    """A warm-up step, one step whose crossings are counted, then the timed steps."""
    step()
    crossings.bytes = 0
    step()
    per_step = crossings.bytes
    timing = measure(step, device=device, budget_s=budget_s, flush_l2=False)
    return {"throughput": batch_size / (timing.median_ms / 1e3), "throughput_unit": "samples/s",
            "timing": timing, "crossing_bytes_per_step": per_step}


def placement_point(placement: str = "all_on_device", num_rows: int = 200_000, dim: int = 32,
                    batch_size: int = 512, bag_size: int = 8, *, device: str = "cpu",
                    budget_s: float = 0.3) -> dict:
    """One placement, measured: samples/s, bytes crossing per step, table bytes."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement={placement!r}: use one of {PLACEMENTS}")
    for name, value in (("num_rows", num_rows), ("dim", dim), ("batch_size", batch_size),
                        ("bag_size", bag_size)):
        positive_int(name, value)
    table_device = "cpu" if placement == "embedding_on_cpu" else device
    torch.manual_seed(0)
    table = torch.nn.EmbeddingBag(num_rows, dim, mode="sum", sparse=True).to(table_device)
    mlp = torch.nn.Sequential(torch.nn.Linear(dim, 256), torch.nn.ReLU(),
                              torch.nn.Linear(256, 1)).to(device)
    sparse_sgd = torch.optim.SGD(table.parameters(), lr=0.05)
    dense_sgd = torch.optim.SGD(mlp.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(1)
    # host-side batches, as a data loader would hand them over; cycled while timing
    batches = [(torch.randint(0, num_rows, (batch_size * bag_size,), generator=gen),
                torch.randint(0, 2, (batch_size, 1), generator=gen).float()) for _ in range(4)]
    offsets = torch.arange(0, batch_size * bag_size, bag_size)
    crossings, cursor = Crossings(), [0]

    def step() -> None:
        indices, labels = batches[cursor[0] % len(batches)]
        cursor[0] += 1
        pooled = table(crossings.move(indices, table_device),
                       crossings.move(offsets, table_device))
        crossings.count_gradient(pooled, device)
        logits = mlp(crossings.move(pooled, device))
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            logits, crossings.move(labels, device))
        sparse_sgd.zero_grad(set_to_none=True)
        dense_sgd.zero_grad(set_to_none=True)
        loss.backward()
        sparse_sgd.step()
        dense_sgd.step()

    table_bytes = num_rows * dim * 4
    return {**_measured(step, crossings, batch_size, device, budget_s),
            "table_bytes": table_bytes, "table_on": "CPU" if table_device == "cpu" else "device",
            "table_bytes_on_device": 0 if table_device == "cpu" and device != "cpu"
            else table_bytes}


class _Staged(torch.autograd.Function):
    """The embedding's output to the device through a host buffer allocated once (pinned on a
    GPU) and its gradient back through another: memory reused every step, both counted."""

    @staticmethod
    def forward(ctx, x, device, out_host, grad_host, crossings):
        out_host.copy_(x)
        ctx.grad_host, ctx.crossings, ctx.moves = grad_host, crossings, device != "cpu"
        crossings.bytes += x.numel() * x.element_size() * ctx.moves
        return out_host.to(device, non_blocking=True)

    @staticmethod
    def backward(ctx, grad):
        ctx.grad_host.copy_(grad)   # device -> pinned host: synchronous, ready for the CPU
        ctx.crossings.bytes += grad.numel() * grad.element_size() * ctx.moves
        return ctx.grad_host, None, None, None, None


class _Layers(nn.Module):
    """A TinyGPT's Transformer layers after its token embedding: positions, blocks, norm, head."""

    def __init__(self, gpt: nn.Module):
        super().__init__()
        self.pos, self.blocks, self.norm, self.head = gpt.pos, gpt.blocks, gpt.norm, gpt.head

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = h + self.pos[:h.shape[1]]
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h))


def lm_placement_point(placement: str = "all_on_device", staging: str = "fresh",
                       size: str = "tiny", batch_size: int = 16, *, device: str = "cpu",
                       budget_s: float = 0.3) -> dict:
    """The lab's Transformer (a preset `size`) with its token embedding on the device or the
    CPU, its layers on the device; the split's activations and gradients crossing through
    `staging` memory. Measured: samples/s, bytes crossing per step (counted), table bytes."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement={placement!r}: use one of {PLACEMENTS}")
    if staging not in STAGING:
        raise ValueError(f"staging={staging!r}: use one of {STAGING}")
    if size not in sizes_of("transformer"):
        raise ValueError(f"size={size!r}: use one of {sizes_of('transformer')}")
    positive_int("batch_size", batch_size)
    task = preset("transformer", size)
    gpt = task.make_model()
    table_device = "cpu" if placement == "embedding_on_cpu" else device
    table = nn.Embedding.from_pretrained(gpt.embed.weight.detach().clone(), freeze=False,
                                         sparse=True).to(table_device)
    layers = _Layers(gpt).to(device)
    sparse_sgd = torch.optim.SGD(table.parameters(), lr=task.lr)
    dense = torch.optim.AdamW(layers.parameters(), lr=task.lr)
    gen = torch.Generator().manual_seed(1)
    batches = [task.make_batch(batch_size, gen) for _ in range(4)]   # host-side, as loaded
    shape = (*batches[0][0].shape, table.embedding_dim)
    pinned = device.startswith("cuda")
    out_host, grad_host = (torch.empty(shape, pin_memory=pinned) for _ in range(2))
    crossings, cursor = Crossings(), [0]

    def step() -> None:
        tokens, targets = batches[cursor[0] % len(batches)]
        cursor[0] += 1
        h = table(crossings.move(tokens, table_device))
        if table_device != device and staging == "reused":
            h = _Staged.apply(h, device, out_host, grad_host, crossings)
        else:
            crossings.count_gradient(h, device)
            h = crossings.move(h, device)
        loss = task.loss_fn(layers(h), crossings.move(targets, device))
        sparse_sgd.zero_grad(set_to_none=True)
        dense.zero_grad(set_to_none=True)
        loss.backward()
        sparse_sgd.step()
        dense.step()

    return {**_measured(step, crossings, batch_size, device, budget_s),
            "table_bytes": table.weight.numel() * table.weight.element_size(),
            "activation_bytes": out_host.numel() * out_host.element_size(),
            "table_on": "CPU" if table_device == "cpu" else "device",
            "pinned": pinned and table_device != device and staging == "reused"}
