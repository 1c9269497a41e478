"""Placement: a large embedding table on the CPU and the dense layers on the GPU, against
everything on the GPU, measured (the bytes crossing counted from the tensors that crossed).

    placement_point("embedding_on_cpu", num_rows=10_000_000, dim=128, device="cuda")
"""

import torch

from ..core.timing import measure
from .matmul import positive_int

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
        if torch.device(device) != tensor.device:
            tensor.register_hook(self._count)

    def _count(self, grad: torch.Tensor) -> None:
        self.bytes += grad.numel() * grad.element_size()


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
