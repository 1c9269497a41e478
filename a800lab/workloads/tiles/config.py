"""What a tile config means on a card: the checks made before a launch (the compiler's verdict
for that card), and the `triton.Config(...)` text a user pastes into their own kernel.

    from a800lab.workloads.tiles.config import check_config, smem_limit, export_config
    spec = MatmulSpec(4096, 4096, 4096, "bf16", backend="triton", block_m=128, num_stages=4)
    check_config(spec, "cuda")                 # ValueError naming the value, why, what to try
    check_config(spec, target="A800")          # plan for an A800/A100 from any machine
    check_config(spec, capability=(9, 0))      # ... or for an architecture
    refused_configs(specs, target="H100")      # {index: reason} of a grid, compiled at once
    smem_limit(capability=(9, 0))              # (232448, "CUDA C++ Programming Guide ...")
    config, source = export_config(spec)       # {"BLOCK_SIZE_M": 128, ...}, "triton.Config(...)"
    overhang(128, 128, 256, 64)                # "block_m=256 > m=128": a masked tile

MatmulSpec itself refuses what is wrong on every card (block sizes, warps, fp8's block_k); the
checks here need the card: a precision it has, TMA loads only from Hopper on, and the kernel's
shared memory and registers against what one thread block may use, read from the compiled
kernel (a800lab.workloads.tiles.facts: the real Triton compiler for the card's architecture,
cached; a labelled estimate where Triton is not installed). On a CUDA device the shared-memory
limit is what torch reports (`shared_memory_per_block_optin`, the driver's opt-in maximum);
otherwise, or to plan for another card, it comes from the architecture table in
a800lab.core.specs.
"""

from __future__ import annotations

import torch

from ...core.backends import HAS_TRITON, resolve_device, why_unavailable
from ...core.precision import check_supported, parse_precision
from ...core.specs import ARCH_SOURCE, Target, arch_limits, match, resolve_target
from ..matmul import MatmulSpec

# the kernel's constexpr names, as in Triton's matmul tutorial, so the export pastes unchanged
TRITON_CONFIG_NAMES = {"block_m": "BLOCK_SIZE_M", "block_n": "BLOCK_SIZE_N",
                       "block_k": "BLOCK_SIZE_K", "group_m": "GROUP_SIZE_M"}


def smem_limit(device: str = "auto", capability: tuple[int, int] | None = None
               ) -> tuple[int, str]:
    """(bytes of shared memory one thread block may use, where that number comes from).

    `capability` plans for another card from the table; otherwise `device` must be a CUDA
    device. ValueError for a capability the table lacks (pass smem_limit_bytes instead).
    """
    if capability is None:
        device = resolve_device(device)
        if device == "cpu":
            raise ValueError("a CPU has no GPU shared memory; pass capability=(8, 0) (A800/A100) "
                             "or smem_limit_bytes= to plan for a card")
        props = torch.cuda.get_device_properties(device)  # cached by torch
        optin = getattr(props, "shared_memory_per_block_optin", None)  # absent in older torch
        if optin:
            return int(optin), f"{props.name}: torch's shared_memory_per_block_optin"
        limit, source = smem_limit(capability=(props.major, props.minor))
        return limit, f"{props.name}, {source}"
    try:
        limits = arch_limits(capability)
    except ValueError as exc:
        raise ValueError(f"{exc}; pass smem_limit_bytes= from "
                         "cudaDevAttrMaxSharedMemoryPerBlockOptin") from None
    return (limits.smem_per_block_optin_bytes,
            f"compute capability {capability[0]}.{capability[1]}: {ARCH_SOURCE}")


def device_target(device: str) -> Target:
    """The Target of a CUDA device: its name, compute capability and SM count."""
    props = torch.cuda.get_device_properties(device)
    return Target(props.name, (props.major, props.minor), props.multi_processor_count,
                  match(props.name))


def check_config(spec: MatmulSpec, device: str = "auto", *,
                 capability: tuple[int, int] | None = None, target: str | Target | None = None,
                 smem_limit_bytes: int | None = None) -> dict:
    """Refuse, with a ValueError naming the value, why and what to try, a spec that cannot run
    on `device` (or, given `target` or `capability`, on that card); else return the facts a
    point records.

    `smem_limit_bytes` overrides the shared-memory limit (a card the table lacks). Returns
    {"smem_bytes", "smem_limit_bytes", "smem_limit_source", "registers", "spill_bytes",
    "pipeline", "mma", "blocks_per_sm", "facts_source"} for backend="triton", {} otherwise.
    """
    if capability is not None and target is None:
        target = resolve_target(f"sm_{capability[0]}{capability[1]}")
    planning = target is not None
    if isinstance(target, str):
        target = resolve_target(target)
    if spec.backend == "torch":
        check_supported(spec.precision, device, target.capability if planning else None)
        return {}
    if spec.backend == "cpu_blocked":
        if planning or resolve_device(device) != "cpu":
            raise ValueError("backend='cpu_blocked' is the CPU stand-in and runs on the CPU only; "
                             "on a GPU use backend='triton' (the tile kernel) or 'torch'")
        return {}
    if not planning:
        device = resolve_device(device)
        interpreted = _interpreter_on()
        if device == "cpu" and not interpreted:
            raise ValueError(_no_gpu_reason())
        if not HAS_TRITON:
            raise ValueError(f"backend='triton' needs Triton: {why_unavailable('triton')}; "
                             "use backend='torch' (cuBLAS) meanwhile")
        if interpreted:
            return _interpreter_facts(spec, device)
        target = device_target(device)
    if smem_limit_bytes is not None:
        source = "given as smem_limit_bytes"
    elif planning:
        source = f"{target.sm}: {ARCH_SOURCE}"
    else:
        smem_limit_bytes, source = smem_limit(device)
    from .facts import tile_facts

    facts = tile_facts(spec, target, smem_limit_bytes=smem_limit_bytes)
    if not facts.fits:
        raise ValueError(f"refused for {target.label} ({facts.source}): {facts.reason}")
    return {"smem_bytes": facts.smem_bytes, "smem_limit_bytes": facts.smem_limit_bytes,
            "smem_limit_source": source, "registers": facts.registers,
            "spill_bytes": facts.spill_bytes, "pipeline": facts.pipeline, "mma": facts.mma,
            "blocks_per_sm": facts.blocks_per_sm, "facts_source": facts.source}


def refused_configs(specs, device: str = "auto", *, target: str | Target | None = None
                    ) -> dict[int, str]:
    """{index: reason} of the specs the compiler refuses on `device` (or `target`), asking
    about the whole grid at once (one cache pass); the others fit."""
    from .facts import tile_facts_grid

    specs = list(specs)
    limit = None
    if target is None:
        device = resolve_device(device)
        target, limit = device_target(device), smem_limit(device)[0]
    facts = tile_facts_grid(specs, target, smem_limit_bytes=limit)
    return {i: fact.reason for i, fact in enumerate(facts) if not fact.fits}


def fitting_points(points, device: str) -> tuple[list[dict], int]:
    """The tile points (dicts of MatmulSpec fields) the compiler lets run on `device`, and how
    many it refused: a battery's grid pruned before anything is measured."""
    points = list(points)
    valid, specs = [], []
    for point in points:
        try:  # wrong on every card (an accumulator over a thread's registers): refused too
            specs.append(MatmulSpec(**point))
        except ValueError:
            continue
        valid.append(dict(point))
    refused = refused_configs(specs, device)
    kept = [p for i, p in enumerate(valid) if i not in refused]
    return kept, len(points) - len(kept)


def _interpreter_on() -> bool:
    if not HAS_TRITON:
        return False
    from .kernel import INTERPRETED  # imports the kernel: TRITON_INTERPRET is read now

    return INTERPRETED


def _no_gpu_reason() -> str:
    triton = "" if HAS_TRITON else f"; also {why_unavailable('triton')}"
    return (f"backend='triton' runs the tile kernel on a CUDA GPU, but "
            f"{why_unavailable('cuda')}{triton}. On CPU use backend='cpu_blocked' (a CPU "
            "stand-in), or set TRITON_INTERPRET=1 before a800lab.workloads.tiles.kernel is "
            "imported to check the kernel's results under the Triton interpreter (slow); to "
            "see what the compiler says of a config for a card, run `python -m a800lab check "
            "tiles --card A800`")


def _interpreter_facts(spec: MatmulSpec, device: str) -> dict:
    """The interpreter runs the kernel with numpy on the host: fp32, fp16 and bf16 only."""
    if device != "cpu":
        raise ValueError("the Triton interpreter is on (TRITON_INTERPRET=1), so kernels run on "
                         "the CPU; use device='cpu', or unset TRITON_INTERPRET to run on the GPU")
    if spec.precision not in ("fp32", "fp16", "bf16"):
        raise ValueError(f"{spec.precision} is a tensor-core format the Triton interpreter "
                         "(numpy on the CPU) cannot reproduce; check 'fp32', 'fp16' or 'bf16' "
                         "there and the rest on a GPU")
    return {"smem_bytes": None, "smem_limit_bytes": None,
            "smem_limit_source": "Triton interpreter: no shared memory"}


def export_config(spec: MatmulSpec) -> tuple[dict, str]:
    """A backend="triton" spec as a dict and as `triton.Config(...)` source text to paste into
    an @triton.autotune config list (constexpr names as in Triton's matmul tutorial)."""
    if spec.backend != "triton":
        raise ValueError(f"a backend='{spec.backend}' spec is not a Triton config; export a "
                         "backend='triton' spec (measured on a GPU)")
    constexprs = {name: getattr(spec, field) for field, name in TRITON_CONFIG_NAMES.items()}
    config = {**constexprs, "num_warps": spec.num_warps, "num_stages": spec.num_stages}
    source = (f"triton.Config({constexprs!r}, num_warps={spec.num_warps}, "
              f"num_stages={spec.num_stages})")
    variant = [text for on, text in (
        (spec.schedule == "persistent", "persistent schedule (one program per SM)"),
        (spec.loads == "tma", "TensorDescriptor (TMA) loads"),
        (spec.fp8_acc == "fast", "fp8 fast accumulation (tl.dot's default on sm_90)"),
        (spec.fp8_acc == "precise", "fp8 precise accumulation (tl.dot(..., "
                                    "max_num_imprecise_acc=32))")) if on]
    if variant:
        source += f"  # for a kernel with {', '.join(variant)}, as in Triton's persistent-matmul " \
                  "tutorial and a800lab.workloads.tiles.kernel"
    return config, source


# Shape multiples that tensor-core paths run fastest at, per input precision: since cuBLAS 11.0
# TensorCores are used for any shape, but the fastest kernels need M, N, K (and the leading
# dimensions) to be multiples of 16 bytes of elements (8 for 16-bit, 4 for tf32, 16 for fp8;
# cuBLAS documentation, "Tensor Core Usage"); A100-class tiles (64/128 wide) fill whole when
# dimensions are multiples of 64.
ALIGNMENT_ELEMENTS = {"fp16": 8, "bf16": 8, "tf32": 4, "fp8": 16}
WHOLE_TILE_MULTIPLE = 64


def overhang(m: int, n: int, block_m: int, block_n: int) -> str:
    """"block_m=256 > m=128" when a tile is larger than the output in a dimension (the kernel
    masks the rows or columns past the edge: mostly padding, no real choice), else ""."""
    return ", ".join(f"{b}={bv} > {d}={dv}" for b, bv, d, dv in (
        ("block_m", block_m, "m", m), ("block_n", block_n, "n", n)) if bv > dv)


def alignment_hints(m: int, n: int, k: int, precision: str) -> list[str]:
    """Plain sentences about m, n, k that are not multiples a TensorCore path runs fastest at,
    each with the padded size to use; [] when every dimension is aligned (or fp32/fp64, no
    TensorCores)."""
    name = parse_precision(precision).name
    need = ALIGNMENT_ELEMENTS.get(name)
    if need is None:
        return []
    hints = []
    for dim, value in (("m", m), ("n", n), ("k", k)):
        if value % need:
            padded = -(-value // need) * need
            hints.append(f"{dim}={value} is not a multiple of {need}: {name} TensorCore paths "
                         f"want multiples of {need} (16 bytes) for their fastest kernels "
                         f"(cuBLAS still uses TensorCores, with narrower loads); pad to {padded}")
        elif value % WHOLE_TILE_MULTIPLE:
            padded = -(-value // WHOLE_TILE_MULTIPLE) * WHOLE_TILE_MULTIPLE
            hints.append(f"{dim}={value}: a multiple of {need} but not of "
                         f"{WHOLE_TILE_MULTIPLE}; A100-class tiles fill whole at {padded}")
    return hints
