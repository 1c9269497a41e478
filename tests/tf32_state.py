"""torch's TF32 settings for tests: a snapshot of every getter, and a reset to torch's defaults.

    from tests.tf32_state import snapshot, reset_to_defaults
    before = snapshot()      # {"get_float32_matmul_precision": "highest", ..., "cuda.matmul": ...}
    ...
    assert snapshot() == before

A getter that raises (torch's legacy getters do once the fp32_precision API holds a value they
cannot express) is recorded as "raises RuntimeError", so "raises before and after" compares equal.
"""

from __future__ import annotations

import torch

_GETTERS = {
    "get_float32_matmul_precision": torch.get_float32_matmul_precision,
    "cuda.matmul.allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
    "cudnn.allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
    "fp32_precision (generic)": lambda: torch.backends.fp32_precision,
    "cudnn.fp32_precision (cuda, all)": lambda: torch.backends.cudnn.fp32_precision,
    "cuda.matmul.fp32_precision": lambda: torch.backends.cuda.matmul.fp32_precision,
    "cudnn.conv.fp32_precision": lambda: torch.backends.cudnn.conv.fp32_precision,
    "cudnn.rnn.fp32_precision": lambda: torch.backends.cudnn.rnn.fp32_precision,
}


def snapshot() -> dict:
    """Every TF32-related getter's answer (or the exception type it raised)."""
    state = {}
    for name, getter in _GETTERS.items():
        try:
            state[name] = getter()
        except RuntimeError as exc:
            state[name] = f"raises {type(exc).__name__}"
    return state


def reset_to_defaults() -> None:
    """Back to a fresh torch process: TF32 off for matmuls, on for cuDNN, nothing else set."""
    torch.backends.fp32_precision = "none"
    torch.backends.cudnn.fp32_precision = "none"
    torch.set_float32_matmul_precision("highest")  # also writes "ieee" to cuda.matmul ...
    torch.backends.cuda.matmul.fp32_precision = "none"  # ... where a fresh process has "none"
    torch.backends.cudnn.allow_tf32 = True
