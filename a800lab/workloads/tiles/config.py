"""What a tile config means on a card: the checks made before a launch (the compiler's verdict
for that card, a800lab.workloads.tiles.facts), and the `triton.Config(...)` text to paste.

    check_config(spec, "cuda")              # ValueError naming the value, why, what to try
    check_config(spec, target="A800")       # or capability=(9, 0): plan for a card from anywhere
    config, source = export_config(spec)    # {"BLOCK_SIZE_M": 128, ...}, "triton.Config(...)"
"""

import torch

from ...core import backends
from ...core.backends import resolve_device, why_unavailable
from ...core.precision import check_supported, parse_precision
from ...core.specs import ARCH_SOURCE, Target, arch_limits, match
from ..matmul import MatmulSpec
from .facts import as_target, interpreted, tile_facts, tile_facts_grid

# the kernel's constexpr names, as in Triton's matmul tutorial, so the export pastes unchanged
TRITON_CONFIG_NAMES = {"block_m": "BLOCK_SIZE_M", "block_n": "BLOCK_SIZE_N",
                       "block_k": "BLOCK_SIZE_K", "group_m": "GROUP_SIZE_M"}


def smem_limit(device: str = "auto", capability: tuple[int, int] | None = None
               ) -> tuple[int, str]:
    """(bytes of shared memory one thread block may use, its source): torch's opt-in maximum
    for a CUDA `device`, or the architecture table's for `capability`."""
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
    props = torch.cuda.get_device_properties(device)
    return Target(props.name, (props.major, props.minor), props.multi_processor_count,
                  match(props.name))


def check_config(spec: MatmulSpec, device: str = "auto", *,
                 capability: tuple[int, int] | None = None, target: str | Target | None = None,
                 smem_limit_bytes: int | None = None) -> dict:
    """ValueError (the value, why, what to try) for a spec that cannot run on `device` (or on
    `target` / `capability`); else the compiler's facts a point records ({} off Triton)."""
    planning = target is not None or capability is not None
    if planning:
        target = as_target(target if target is not None else capability)
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
        if device == "cpu" and not interpreted():
            raise ValueError(_no_gpu_reason())
        if not backends.HAS_TRITON:
            raise ValueError(f"backend='triton' needs Triton: {why_unavailable('triton')}; "
                             "use backend='torch' (cuBLAS) meanwhile")
        if interpreted():
            return _interpreter_facts(spec, device)
        target = device_target(device)
    if smem_limit_bytes is not None:
        source = "given as smem_limit_bytes"
    elif planning:
        source = f"{target.sm}: {ARCH_SOURCE}"
    else:
        smem_limit_bytes, source = smem_limit(device)
    facts = tile_facts(spec, target, smem_limit_bytes=smem_limit_bytes)
    if not facts.fits:
        raise ValueError(f"refused for {target.label} ({facts.source}): {facts.reason}")
    return {"smem_bytes": facts.smem_bytes, "smem_limit_bytes": facts.smem_limit_bytes,
            "smem_limit_source": source, "registers": facts.registers,
            "spill_bytes": facts.spill_bytes, "pipeline": facts.pipeline, "mma": facts.mma,
            "blocks_per_sm": facts.blocks_per_sm, "facts_source": facts.source}


def refused_configs(specs, device: str = "auto", *, target: str | Target | None = None
                    ) -> dict[int, str]:
    """{index: reason} of the specs the compiler refuses on `device` (or `target`)."""
    limit = None
    if target is None:
        device = resolve_device(device)
        target, limit = device_target(device), smem_limit(device)[0]
    facts = tile_facts_grid(list(specs), target, smem_limit_bytes=limit)
    return {i: fact.reason for i, fact in enumerate(facts) if not fact.fits}


def fitting_points(points, device: str) -> tuple[list[dict], int]:
    """(the tile points, dicts of MatmulSpec fields, that may run on `device`, how many not)."""
    points, specs = list(points), {}
    for i, point in enumerate(points):
        try:  # wrong on every card (an accumulator over a thread's registers): refused too
            specs[i] = MatmulSpec(**point)
        except ValueError:
            pass
    refused = refused_configs(specs.values(), device)
    kept = [dict(points[i]) for j, i in enumerate(specs) if j not in refused]
    return kept, len(points) - len(kept)


def _no_gpu_reason() -> str:
    triton = "" if backends.HAS_TRITON else f"; also {why_unavailable('triton')}"
    return (f"backend='triton' runs the tile kernel on a CUDA GPU, but "
            f"{why_unavailable('cuda')}{triton}. On CPU use backend='cpu_blocked' (a CPU "
            "stand-in), or set TRITON_INTERPRET=1 before a800lab.workloads.tiles.kernel is "
            "imported to check the kernel's results under the Triton interpreter (slow); to "
            "see what the compiler says of a config for a card, run `python -m a800lab check "
            "tiles --card A800`")


def _interpreter_facts(spec: MatmulSpec, device: str) -> dict:
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
    """A backend="triton" spec as a dict and as `triton.Config(...)` source text."""
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


# cuBLAS's fastest tensor-core kernels want M, N, K in multiples of 16 bytes of elements (cuBLAS
# documentation, "Tensor Core Usage"); A100-class tiles fill whole at multiples of 64
ALIGNMENT_ELEMENTS = {"fp16": 8, "bf16": 8, "tf32": 4, "fp8": 16}
WHOLE_TILE_MULTIPLE = 64


def overhang(m: int, n: int, block_m: int, block_n: int) -> str:
    """"block_m=256 > m=128" when a tile is larger than the output in a dimension, else ""."""
    return ", ".join(f"{b}={bv} > {d}={dv}" for b, bv, d, dv in (
        ("block_m", block_m, "m", m), ("block_n", block_n, "n", n)) if bv > dv)


def alignment_hints(m: int, n: int, k: int, precision: str) -> list[str]:
    """A sentence, with the padded size, for each of m, n, k off a fast TensorCore multiple."""
    name = parse_precision(precision).name
    need = ALIGNMENT_ELEMENTS.get(name)
    if need is None:
        return []
    hints = []
    for dim, value in (("m", m), ("n", n), ("k", k)):
        if value % need:
            hints.append(f"{dim}={value} is not a multiple of {need}: {name} TensorCore paths "
                         f"want multiples of {need} (16 bytes) for their fastest kernels "
                         "(cuBLAS still uses TensorCores, with narrower loads); pad to "
                         f"{-(-value // need) * need}")
        elif value % WHOLE_TILE_MULTIPLE:
            whole = -(-value // WHOLE_TILE_MULTIPLE) * WHOLE_TILE_MULTIPLE
            hints.append(f"{dim}={value}: a multiple of {need} but not of "
                         f"{WHOLE_TILE_MULTIPLE}; A100-class tiles fill whole at {whole}")
    return hints
