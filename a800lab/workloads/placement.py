"""Placement: a large embedding table on the CPU and the dense layers on the GPU, against
everything on the GPU, measured.

    placement_point("embedding_on_cpu", num_rows=10_000_000, dim=128, device="cuda")
    placement_point("all_on_device", num_rows=200_000, dim=32, device="cpu")   # CPU fallback

The model is a recommendation-style step: each sample looks up `bag_size` rows of an
EmbeddingBag (summed), and an MLP on the pooled vector predicts a click (binary cross-entropy).
The table is trained by sparse SGD where it lives; the MLP by SGD on the device.

- "all_on_device": table and MLP on the device; the indices and labels cross to it.
- "embedding_on_cpu": the lookup runs on the CPU; the pooled vectors (batch x dim) cross to the
  device, and their gradient comes back for the table's update.

Bytes crossing between host and device are counted from the tensors that crossed: each moved
tensor as it is sent, and the pooled vectors' gradient as it arrives on the CPU. The device
memory is the point's own peak (core.window): the table's bytes count on the device only when it
lives there. On a CPU both placements run on the CPU: nothing crosses (0 bytes) and the step
times differ by bookkeeping only; the comparison needs a GPU to mean anything.
"""

from __future__ import annotations

import torch

from ..core.timing import measure

PLACEMENTS = ("all_on_device", "embedding_on_cpu")


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
        """Count `tensor`'s gradient when it arrives from another device."""
        if torch.device(device) != tensor.device:
            tensor.register_hook(lambda g: self._add(g))

    def _add(self, grad: torch.Tensor) -> None:
        self.bytes += grad.numel() * grad.element_size()


def placement_point(placement: str = "all_on_device", num_rows: int = 200_000, dim: int = 32,
                    batch_size: int = 512, bag_size: int = 8, *, device: str = "cpu",
                    budget_s: float = 0.3) -> dict:
    """One placement, measured: samples/s, bytes crossing per step, table bytes (a sweep
    point; its own peak device memory comes from the sweep's window)."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement={placement!r}: use one of {PLACEMENTS}")
    for name, value in (("num_rows", num_rows), ("dim", dim), ("batch_size", batch_size),
                        ("bag_size", bag_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive int")
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

    step()
    crossings.bytes = 0
    step()  # one counted step
    per_step = crossings.bytes
    timing = measure(step, device=device, budget_s=budget_s, flush_l2=False)
    table_bytes = num_rows * dim * 4
    return {"throughput": batch_size / (timing.median_ms / 1e3), "throughput_unit": "samples/s",
            "timing": timing, "crossing_bytes_per_step": per_step, "table_bytes": table_bytes,
            "table_on": "CPU" if table_device == "cpu" else "device",
            "table_bytes_on_device": 0 if table_device == "cpu" and device != "cpu"
            else table_bytes}
