"""gpu_check's rehearsal on a machine without a GPU: what can fail before a lent GPU is reached.

    python3 scripts/gpu_check.py --rehearse            # in this environment
    scripts/rehearse_lent_stack.sh                     # in a venv shaped like the lent stack

It imports every check module, collects the `gpu`-marked tests (as the lent stack would: no
ipywidgets there), and compiles every Triton tile launch the stages make, for sm_80 and sm_90,
twice: by the compile-only facts (a800lab.workloads.tiles.facts) and by the installed Triton's
own JIT driven as a launch drives it, on CPU tensors (`run(..., warmup=True)` under a
compile-only driver: it binds, specialises and compiles, and launches nothing). The two kernel
hashes must be equal, or check_tiles would fail on the card for the lab's reasons.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent


class CompileOnlyDriver:
    """Triton's active driver for a card this machine lacks: the JIT compiles for `target`."""

    def __init__(self, target):
        self.target = target

    def get_current_device(self):
        return f"compile-only:{self.target.arch}"  # never a real device's binder cache

    def get_current_stream(self, device):
        return 0

    def get_current_target(self):
        return self.target


def compile_like_a_launch(spec, target):
    """The CompiledKernel a launch of `spec` (a backend="triton" MatmulSpec) on `target` (a
    Target) makes Triton's JIT build, from real CPU tensors of the spec's shapes."""
    from triton.runtime import driver

    from a800lab.core.precision import parse_precision
    from a800lab.workloads.tiles.facts import DEFAULT_PROGRAMS, gpu_target
    from a800lab.workloads.tiles.kernel import kernel_call

    dtype = parse_precision(spec.precision).dtype
    a = torch.empty(spec.m, spec.k, dtype=dtype)
    b = (torch.empty(spec.n, spec.k, dtype=dtype).t() if spec.precision == "fp8"
         else torch.empty(spec.k, spec.n, dtype=dtype))
    c = torch.empty(spec.m, spec.n, dtype=torch.bfloat16 if spec.precision == "fp8" else dtype)
    call = kernel_call(spec, a, b, c, scale=0.37 if spec.precision == "fp8" else None,
                       num_programs=target.sm_count or DEFAULT_PROGRAMS)
    saved = driver._active
    driver.set_active(CompileOnlyDriver(gpu_target(target)))
    try:
        return call.kernel.run(*call.args, grid=call.grid, warmup=True, **call.constexprs,
                               **call.options)
    finally:
        driver._active = saved


def collect_gpu_tests() -> tuple[bool, str]:
    """(collected without an error, pytest's last line) for `pytest --collect-only -m gpu`."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "gpu",
                           "-p", "no:cacheprovider", "-p", "no:nbval", "tests"], cwd=REPO,
                          capture_output=True, text=True, timeout=300, env={
                              **os.environ, "PYTHONPATH": os.pathsep.join(
                                  [str(REPO), os.environ.get("PYTHONPATH", "")])})
    last = (proc.stdout.strip().splitlines() or [proc.stderr.strip()[-300:]])[-1]
    return proc.returncode == 0 and "error" not in last.lower(), last


def rehearse(targets: tuple[str, ...] = ("H100 SXM5 80GB", "A800")) -> int:
    """Run the rehearsal, one line per step; 0 when every step holds, else 1."""
    import gpu_check
    import triton
    from gpu_checks_labs import tile_launches

    from a800lab.core.specs import resolve_target
    from a800lab.workloads.tiles.facts import tile_facts

    failures = []
    missing = ", ".join(m for m in ("ipywidgets", "IPython", "jupyterlab") if _absent(m))
    print(f"[rehearse] Python {sys.version.split()[0]}, torch {torch.__version__}, triton "
          f"{triton.__version__}; not installed: {missing or 'none of those the lab skips'}")
    print(f"ok    {len(gpu_check.CHECKS)} checks imported in {len(gpu_check.STAGES)} stages, "
          "each with its expectation")
    collected, last = collect_gpu_tests()
    print(f"{'ok' if collected else 'FAIL':<5} gpu tests collected: {last}")
    if not collected:
        failures.append("gpu tests")
    with tempfile.TemporaryDirectory() as folder:
        os.environ["A800LAB_COMPILE_CACHE"] = str(Path(folder) / "compiled_tiles.json")
        for card in targets:
            target = resolve_target(card)
            for what, specs in tile_launches(target.capability).items():
                for spec in specs:
                    facts = tile_facts(spec, target)
                    jit = compile_like_a_launch(spec, target)
                    same = facts.exact and facts.kernel_hash == jit.hash and \
                        facts.smem_bytes == jit.metadata.shared
                    print(f"{'ok' if same else 'FAIL':<5} {target.sm} {what}: {spec.m}^3 "
                          f"{spec.precision} {_tile_text(spec)}: facts {facts.kernel_hash[:12]}"
                          f" {facts.smem_bytes} B, JIT {jit.hash[:12]} {jit.metadata.shared} B;"
                          f" {facts.registers} registers, {facts.spill_bytes} B local")
                    if not same:
                        failures.append(f"{target.sm} {spec.tile}")
    print(f"[rehearse] {'passed' if not failures else 'FAILED: ' + '; '.join(failures)}; not "
          "rehearsed: what runs only on a card (kernels launched, timings, CUDA graphs "
          "captured, NCCL, NVML readings): the checks judge those there")
    return 1 if failures else 0


def _tile_text(spec) -> str:
    text = f"{spec.block_m}x{spec.block_n}x{spec.block_k} w{spec.num_warps} s{spec.num_stages}"
    extra = [v for v in (spec.schedule, spec.loads, spec.fp8_acc) if v not in
             (None, "tile", "pointer")]
    return re.sub(r"\s+", " ", " ".join([text, *extra]))


def _absent(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return True
    return False
