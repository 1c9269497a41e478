"""One-time initialisation of torch's runtime, done before a process's first measured point so
that it is never charged to that point's memory or time.

    warm_runtime("cpu")      # once per process and device; later calls return at once

A fresh process pays once for what torch loads lazily: autograd's engine, the optimizers'
first step (which imports torch._dynamo and friends, over 100 MiB of resident memory on a CPU),
the BLAS and its thread pool, cuBLAS's workspace on a GPU. Without this the first point of a
fresh kernel showed ~150 MiB of "own peak memory" while the same point measured again showed
5 MiB. run_sweep calls it before its first point, and every measured window before reading
its baseline (MemoryProbe.warm), so points measured outside a sweep are covered too.
"""

from __future__ import annotations

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
