"""Torch's one-time start-up (autograd, the optimizers' first step, BLAS, cuBLAS's workspace),
run once per process and device before the first measured window, so no point is charged for
it (a fresh kernel's first point showed ~150 MiB of own memory, the same point again 5 MiB).

    warm_runtime("cpu")
"""

import threading

import torch

_warmed: set[str] = set()
_lock = threading.Lock()


def warm_runtime(device: str) -> None:
    """Run a tiny training step (linear layers, cross-entropy, backward, SGD and AdamW) and a
    matmul on `device` once per process, so their one-time costs fall before any window."""
    with _lock:
        if device in _warmed:
            return
        _warmed.add(device)
    with torch.random.fork_rng(devices=[] if device == "cpu" else [torch.device(device)]):
        model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(),
                                    torch.nn.Linear(16, 4)).to(device)
        x = torch.randn(8, 16, device=device)
        y = torch.randint(0, 4, (8,), device=device)
        for optimizer in (torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                          torch.optim.AdamW(model.parameters(), lr=0.01)):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        torch.matmul(x, x.T)
        if device.startswith("cuda"):
            if torch.cuda.is_bf16_supported():  # cuBLASLt's path too
                torch.matmul(x.bfloat16(), x.T.bfloat16())
            torch.cuda.synchronize(device)
