"""DCGM's diagnostic, found and run: the memory-integrity checks neither nvidia-smi nor this
lab's stress run make (the long ones take the GPU: the lab only names them).

    dcgm_status()        # {"found": False, "path": None, "advice": "..."}
    run_quick_diag()     # `dcgmi diag -r 1`: {"command", "returncode", "output"}
"""

import shutil
import subprocess
from collections.abc import Callable

QUICK = ["dcgmi", "diag", "-r", "1"]
QUICK_TIMEOUT_S = 300.0
LONG_ADVICE = ("memory integrity: `dcgmi diag -r 3` (about 15 minutes of stress and memory "
               "tests, memtest at -r 4) on a drained GPU; nvidia-smi has no memory stress test, "
               "and an A800/A100's HBM2e memory clock is fixed (nothing to raise)")


def dcgm_status(which: Callable[[str], str | None] = shutil.which) -> dict:
    """Whether `dcgmi` is on the PATH, and what to run (or install) for memory integrity."""
    path = which("dcgmi")
    if path is None:
        return {"found": False, "path": None, "advice": (
            "dcgmi not found: install NVIDIA DCGM (datacenter-gpu-manager) for the GPU "
            f"diagnostics; {LONG_ADVICE}")}
    return {"found": True, "path": path, "advice": (
        f"dcgmi found ({path}): `python -m a800lab health --dcgm` runs its quick deployment "
        f"checks (`dcgmi diag -r 1`: seconds, no load on the GPUs); {LONG_ADVICE}")}


def run_quick_diag(run: Callable | None = None, timeout_s: float = QUICK_TIMEOUT_S) -> dict:
    """`dcgmi diag -r 1`, its exit status and output (ValueError when dcgmi is missing or late;
    `run`: subprocess.run's stand-in)."""
    run = run or subprocess.run
    try:
        done = run(QUICK, capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        raise ValueError("dcgmi is not on the PATH: install NVIDIA DCGM "
                         "(datacenter-gpu-manager) and start its host engine (nv-hostengine)"
                         ) from None
    except subprocess.TimeoutExpired:
        raise ValueError(f"`{' '.join(QUICK)}` did not finish in {timeout_s:g} s; is the DCGM "
                         "host engine (nv-hostengine) running?") from None
    return {"command": " ".join(QUICK), "returncode": done.returncode,
            "output": (done.stdout or "") + (done.stderr or "")}
