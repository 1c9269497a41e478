"""The compiler's verdict on a tile config for any target card, on any machine, cached: the lab's
kernel compiled as a launch would compile it; without Triton, a labelled estimate.

    facts = tile_facts(spec, "A800")    # or "H100", "sm_90", a Target; no GPU needed
    facts.fits, facts.reason, facts.smem_bytes, facts.registers, facts.blocks_per_sm
"""

import contextlib
import io
import json
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from ...core import backends
from ...core.precision import parse_precision, unsupported_reason
from ...core.specs import Target, arch_limits, resolve_target
from ...core.store import cache_path, read_json, write_json_atomic
from ..matmul import MatmulSpec
from .occupancy import occupancy

CACHE_ENV = "A800LAB_COMPILE_CACHE"
CACHE_FILE = "compiled_tiles.json"
SCHEMA = 2  # 2: the kernel hash
TMA_MIN_CAPABILITY = (9, 0)
TMA_MAX_BOX = 256            # a TMA box holds at most 256 elements per dimension
DEFAULT_PROGRAMS = 132       # the persistent program count when the target's SMs are unknown
_RESOURCE = re.compile(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)")


@dataclass(frozen=True)
class TileFacts:
    """What one config costs on one target, and whether it can run there (`smem_bytes`: the
    dynamic shared memory a launch asks for)."""

    target: str
    source: str
    exact: bool
    fits: bool
    reason: str
    smem_bytes: int | None
    static_smem_bytes: int
    smem_limit_bytes: int
    registers: int | None
    spill_bytes: int | None
    pipeline: str
    mma: str
    blocks_per_sm: int
    occupancy: dict
    compile_s: float
    kernel_hash: str = ""   # the key Triton's own cache (and a launch's JIT) files it under


def as_target(target) -> Target:
    """A Target from a Target, a card or "sm_XY" name, or (major, minor)."""
    if isinstance(target, Target):
        return target
    if isinstance(target, tuple):
        return resolve_target(f"sm_{target[0]}{target[1]}")
    return resolve_target(target)


def tile_facts(spec: MatmulSpec, target, *, smem_limit_bytes: int | None = None,
               cache: str | Path | None = None) -> TileFacts:
    """The facts of a backend="triton" spec on `target`; `smem_limit_bytes` overrides the
    table's per-block limit (a real device's own figure)."""
    return tile_facts_grid([spec], target, smem_limit_bytes=smem_limit_bytes, cache=cache)[0]


def tile_facts_grid(specs: Iterable[MatmulSpec], target, *, smem_limit_bytes: int | None = None,
                    cache: str | Path | None = None,
                    on_config: Callable[[MatmulSpec, TileFacts], None] | None = None
                    ) -> list[TileFacts]:
    """tile_facts for every spec, reading and writing the cache once."""
    target = as_target(target)
    store = _Cache(Path(cache) if cache is not None else cache_path(CACHE_ENV, CACHE_FILE))
    out = []
    for spec in specs:
        out.append(_facts(spec, target, smem_limit_bytes, store))
        if on_config is not None:
            on_config(spec, out[-1])
    store.save()
    return out


def _facts(spec: MatmulSpec, target: Target, smem_limit_bytes: int | None,
           store: "_Cache") -> TileFacts:
    limits = arch_limits(target.capability)
    limit = limits.smem_per_block_optin_bytes if smem_limit_bytes is None else smem_limit_bytes
    refusal = card_refusal(spec, target.capability)
    if refusal and spec.loads == "tma":  # no descriptor can be built: nothing to compile
        raw, source = {"triton": None}, f"the lab's check for {target.sm}"
    elif backends.HAS_TRITON and not interpreted():
        raw = store.compiled(spec, target)  # also for a refused precision: the compiler's say
        source = f"Triton {raw['triton']} compiler for {target.sm}"
    else:
        raw = estimate(spec, target.capability)
        source = (f"estimate for {target.sm} by Triton's rule (Triton is not usable here: "
                  f"{backends.why_unavailable('triton') or 'TRITON_INTERPRET=1'})")
    error = raw.get("error")
    if refusal or error:
        reason = refusal or f"compiler error: {error}"
        if refusal and error:
            reason += f"; Triton {raw['triton']} agrees: {error}"
        return TileFacts(target.sm, source, raw.get("triton") is not None, False, reason, None,
                         0, limit, None, None, "-", "-", 0, {}, raw.get("compile_s", 0.0))
    occ = occupancy(limits, num_warps=spec.num_warps,
                    registers_per_thread=raw["registers"] or 0, smem_bytes=raw["smem_bytes"],
                    static_smem_bytes=raw["static_smem_bytes"])
    used = raw["smem_bytes"] + raw["static_smem_bytes"]
    reason = ""
    if used > limit:
        reason = _smem_refusal(spec, raw, limit, target, limits.smem_per_block_optin_bytes
                               == limit)
    elif occ.blocks_per_sm == 0:
        reason = (f"registers: {raw['registers']} per thread x {32 * spec.num_warps} threads "
                  f"exceed the {limits.registers_per_block} a block may hold on {target.sm}; "
                  "raise num_warps or shrink the tile")
    return TileFacts(target.sm, source, raw.get("triton") is not None, not reason, reason,
                     raw["smem_bytes"], raw["static_smem_bytes"], limit, raw["registers"],
                     raw["spill_bytes"], raw["pipeline"], raw["mma"], occ.blocks_per_sm,
                     occ.to_dict(), raw.get("compile_s", 0.0), raw.get("hash", ""))


def card_refusal(spec: MatmulSpec, capability: tuple[int, int]) -> str:
    """The lab's own reason a config cannot run on a card of `capability` (a precision it
    lacks, TMA's limits), before compiling; "" otherwise."""
    reason = unsupported_reason(spec.precision, "cuda", capability)
    if reason and spec.precision == "fp8":
        reason += ("; fp8 tensor-core instructions arrived with Ada and Hopper (8.9, 9.0): "
                   "Ampere cards such as the A800 and A100 (8.0) have none")
    if reason or spec.loads != "tma":
        return f"precision: {reason}" if reason else ""
    if tuple(capability) < TMA_MIN_CAPABILITY:
        return (f"TMA: loads='tma' needs the Tensor Memory Accelerator of Hopper (compute "
                f"capability >= 9.0); this card is {capability[0]}.{capability[1]}: use "
                "loads='pointer'")
    big = [f"{name}={getattr(spec, name)}" for name in ("block_m", "block_n", "block_k")
           if getattr(spec, name) > TMA_MAX_BOX]
    if big:
        return f"TMA: loads='tma' copies boxes of at most {TMA_MAX_BOX} per side; {', '.join(big)}"
    element = parse_precision(spec.precision).bytes_per_element
    out = 2 if spec.precision == "fp8" else element
    rows = {"A (m x k)": spec.k * element, "C (m x n)": spec.n * out,
            "B": (spec.k if spec.precision == "fp8" else spec.n) * element}
    bad = [f"{name} rows of {size} B" for name, size in rows.items() if size % 16]
    if bad:
        need = 16 // element
        return (f"TMA: loads='tma' needs rows whose length is a multiple of 16 bytes; "
                f"{', '.join(bad)} are not: pad k and n to multiples of {need} for "
                f"{spec.precision}, or use loads='pointer'")
    return ""


def refusal_kind(message: str) -> str:
    """The short kind of a config refusal ("shared memory", "TMA", ...) for a heatmap cell."""
    found = re.search(r"refused for .*?\): ([a-zA-Z0-9 ]+):", message)
    return found[1] if found else ""


def _smem_refusal(spec, raw: dict, limit: int, target: Target, table_limit: bool) -> str:
    used = raw["smem_bytes"] + raw["static_smem_bytes"]
    static = (f" + {raw['static_smem_bytes']:,} B static = {used:,} B"
              if raw["static_smem_bytes"] else "")
    where = f"the {target.sm} limit" if table_limit else "this device's limit"
    per_stage = (spec.block_m + spec.block_n) * spec.block_k * parse_precision(
        spec.precision).bytes_per_element
    fewer = spec.num_stages - -(-(used - limit) // per_stage)
    advice = (f"use num_stages={fewer} or fewer, or a smaller block_k" if fewer >= 1 else
              "halve block_k, block_m or block_n")
    return (f"shared memory: {raw['smem_bytes']:,} B{static} ({used / 1024:.4g} KiB) "
            f"exceeds {where} of {limit:,} B ({limit / 1024:.4g} KiB) per thread block; {advice}")


# ---- the estimate (no Triton) ------------------------------------------------------------------
def mma_kind(spec: MatmulSpec, capability: tuple[int, int]) -> str:
    """The MMA instruction Triton picks: wgmma on sm_90 for a warp group's tiles (num_warps a
    multiple of 4, block_m of 64), else mma.sync; FMA for fp32."""
    if spec.precision == "fp32":
        return "FMA (no tensor cores)"
    if tuple(capability) >= (9, 0) and spec.num_warps % 4 == 0 and spec.block_m % 64 == 0:
        return "wgmma"
    return "mma.sync"


def estimate(spec: MatmulSpec, capability: tuple[int, int]) -> dict:
    """Triton's rule for the shared memory of the lab's kernel, as a raw facts dict: rows of
    16-element multiples are pipelined into num_stages - 1 buffers (num_stages with wgmma or
    TMA, + 1 for a persistent wgmma loop), others get one buffer or the epilogue's scratch.
    Equal to Triton 3.7's figure on 534 of the tuner grid's 560 configs, within 2x on the rest."""
    element = parse_precision(spec.precision).bytes_per_element
    out = 2 if spec.precision == "fp8" else element
    mma = mma_kind(spec, capability)
    tile = (spec.block_m + spec.block_n) * spec.block_k * element
    aligned = spec.loads == "tma" or not any(d % 16 for d in (spec.n, spec.k))
    if not aligned:
        smem, pipeline = max(tile, spec.block_m * spec.block_n * out), "none"
    else:
        buffers = spec.num_stages if mma == "wgmma" or spec.loads == "tma" else \
            spec.num_stages - 1
        if mma == "wgmma" and spec.schedule == "persistent":
            buffers += 1
        smem = tile * max(buffers, 1) + (8 * spec.num_stages if spec.loads == "tma" else 0)
        pipeline = ("TMA" if spec.loads == "tma" else "cp.async") if buffers >= 1 else "none"
    return {"triton": None, "smem_bytes": smem, "static_smem_bytes": 0, "registers": None,
            "spill_bytes": None, "mma": mma, "pipeline": pipeline, "compile_s": 0.0}


# ---- compiling ---------------------------------------------------------------------------------
def interpreted() -> bool:
    """Whether the kernel runs under the Triton interpreter (imports it: TRITON_INTERPRET is
    read then)."""
    if not backends.HAS_TRITON:
        return False
    from .kernel import INTERPRETED

    return INTERPRETED


def launch_of(spec: MatmulSpec, target: Target):
    """The KernelCall a launch of `spec` on `target` makes, on meta tensors laid out as the point
    function makes A, B and C (fp8: B column-major, C bf16): shape, strides, dtype, no data."""
    from .kernel import kernel_call

    m, n, k, fp8 = spec.m, spec.n, spec.k, spec.precision == "fp8"
    dtype = parse_precision(spec.precision).dtype
    a = torch.empty_strided((m, k), (k, 1), dtype=dtype, device="meta")
    b = torch.empty_strided((k, n), (1, k) if fp8 else (n, 1), dtype=dtype, device="meta")
    c = torch.empty_strided((m, n), (n, 1), dtype=torch.bfloat16 if fp8 else dtype,
                            device="meta")
    return kernel_call(spec, a, b, c, scale=1.0 if fp8 else None,
                       num_programs=target.sm_count or DEFAULT_PROGRAMS)


def gpu_target(target: Target):
    from triton.backends.compiler import GPUTarget

    return GPUTarget("cuda", target.capability[0] * 10 + target.capability[1], 32)


def specialisation(call, target: Target):
    """(options, signature, constexprs, attrs) of `call` on `target`, bound by the installed
    Triton's own JIT binder, so the compile-only kernel is the one a launch builds."""
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    kernel, backend = call.kernel, make_backend(gpu_target(target))
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    kwargs = {**call.constexprs, **call.options}
    bound, specialization, options = binder(*call.args, **kwargs)
    return kernel._pack_args(backend, kwargs, bound, specialization, options)


def compile_raw(spec: MatmulSpec, target: Target) -> dict:
    """Compile the spec's launch for `target` and read its facts (the cache's value)."""
    import triton
    from triton.compiler import ASTSource

    call = launch_of(spec, target)
    options, signature, constexprs, attrs = specialisation(call, target)
    started = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # ptxas failures print a reproducer
            compiled = triton.compile(ASTSource(call.kernel, signature, constexprs, attrs),
                                      target=gpu_target(target), options=options.__dict__)
    except Exception as exc:  # a refusal is a finding: keep its most telling line
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()] or [""]
        text = next((line for line in reversed(lines) if "Error" in line), lines[-1])
        return {"triton": triton.__version__, "error": f"{type(exc).__name__}: {text}"[:400],
                "compile_s": round(time.perf_counter() - started, 3)}
    ptx = compiled.asm["ptx"]
    try:
        usage = resource_usage(compiled.asm["cubin"])
    except (OSError, subprocess.SubprocessError, RuntimeError):  # no usable cuobjdump
        usage = {"registers": None, "shared": 0, "local": None}
    return {"triton": triton.__version__, "hash": compiled.hash,
            "smem_bytes": int(compiled.metadata.shared),
            "static_smem_bytes": usage["shared"], "registers": usage["registers"],
            "spill_bytes": usage["local"],
            "pipeline": "TMA" if "cp.async.bulk.tensor" in ptx else
            "cp.async" if "cp.async" in ptx else "none",
            "mma": "wgmma" if "wgmma.mma_async" in ptx else "mma.sync" if "mma.sync" in ptx
            else "FMA (no tensor cores)",
            "compile_s": round(time.perf_counter() - started, 3)}


def resource_usage(cubin: bytes) -> dict:
    """Registers, static shared bytes and local (stack + spill) bytes per thread of a cubin."""
    from triton import knobs

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "kernel.cubin"
        path.write_bytes(cubin)
        text = subprocess.run([knobs.nvidia.cuobjdump.path, "--dump-resource-usage", str(path)],
                              capture_output=True, text=True, check=True, timeout=60).stdout
    found = _RESOURCE.search(text)
    if found is None:
        raise RuntimeError(f"cuobjdump printed no resource usage: {text[:200]!r}")
    # ptxas spills into the stack frame (STACK); LOCAL is local memory outside it. Both are
    # the per-thread local memory the driver reports (CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES),
    # which a launch's JIT reads as n_spills x 4.
    return {"registers": int(found[1]), "shared": int(found[3]),
            "local": int(found[2]) + int(found[4])}


class _Cache:
    """The compile cache: one JSON file, read once, written once per grid."""

    def __init__(self, path: Path):
        self.path, self._entries, self._dirty = path, None, False

    def _on_disk(self) -> dict:
        data = read_json(self.path, what="a800lab's compile cache")
        return dict(data.get("entries", {})) if data.get("schema") == SCHEMA else {}

    def compiled(self, spec: MatmulSpec, target: Target) -> dict:
        if self._entries is None:
            self._entries = self._on_disk()
        key = self.key(spec, target)
        if key not in self._entries:
            self._entries[key] = compile_raw(spec, target)
            self._dirty = True
        return self._entries[key]

    @staticmethod
    def key(spec: MatmulSpec, target: Target) -> str:
        import triton

        call = launch_of(spec, target)
        options, signature, constexprs, attrs = specialisation(call, target)
        return json.dumps({"triton": triton.__version__, "kernel": call.kernel.cache_key,
                           "signature": signature, "constexprs": repr(sorted(
                               constexprs.items())), "attrs": repr(sorted(attrs.items())),
                           "options": repr(sorted(options.__dict__.items())),
                           "target": target.sm}, sort_keys=True)

    def save(self) -> None:
        if self._dirty:
            entries = {**self._on_disk(), **self._entries}
            write_json_atomic(self.path, {"schema": SCHEMA, "entries": entries})
            self._dirty = False
