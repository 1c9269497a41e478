"""What a tile config means on a card: shared-memory limits, the checks made before a launch,
and the `triton.Config(...)` text a user pastes into their own kernel.

    from a800lab.workloads.tiles.config import check_config, smem_limit, export_config
    spec = MatmulSpec(4096, 4096, 4096, "bf16", backend="triton", block_m=128, num_stages=4)
    check_config(spec, "cuda")                 # ValueError naming the value, why, what to try
    check_config(spec, capability=(8, 0))      # plan for an A800/A100 from any machine
    smem_limit(capability=(9, 0))              # (232448, "CUDA C++ Programming Guide ...")
    config, source = export_config(spec)       # {"BLOCK_SIZE_M": 128, ...}, "triton.Config(...)"

MatmulSpec itself refuses what is wrong on every card (block sizes, warps, fp8's block_k); the
checks here need the card: the pipeline's shared memory (MatmulSpec.smem_bytes) against what one
thread block may use, and a precision the card has. On a CUDA device the limit is what torch
reports (`shared_memory_per_block_optin`, the driver's opt-in maximum); otherwise, or to plan for
another card, it comes from a per-compute-capability table.
"""

from __future__ import annotations

import torch

from ...core.backends import HAS_TRITON, resolve_device, why_unavailable
from ...core.precision import check_supported, parse_precision, unsupported_reason
from ..matmul import MatmulSpec

KIB = 1024
# Maximum shared memory one thread block can opt in to (cudaDevAttrMaxSharedMemoryPerBlockOptin):
# CUDA C++ Programming Guide, "Technical Specifications per Compute Capability". An SM has 1 KiB
# more (the A100/A800 SM has 164 KiB, a block 163 KiB); torch's inductor keys A100 and H100 on
# the same 166912 and 232448 bytes.
SMEM_PER_BLOCK_BYTES = {
    (7, 0): 96 * KIB,    # V100
    (7, 5): 64 * KIB,    # T4, RTX 20xx
    (8, 0): 163 * KIB,   # A100, A800
    (8, 6): 99 * KIB,    # A10, RTX 30xx
    (8, 7): 163 * KIB,   # Jetson Orin
    (8, 9): 99 * KIB,    # L4, L40S, RTX 40xx
    (9, 0): 227 * KIB,   # H100, H800, H200
    (10, 0): 227 * KIB,  # B200
    (12, 0): 99 * KIB,   # RTX 50xx
}
SMEM_TABLE_SOURCE = ("CUDA C++ Programming Guide, Technical Specifications per Compute "
                     "Capability (maximum shared memory per thread block)")
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
    capability = (int(capability[0]), int(capability[1]))
    if capability not in SMEM_PER_BLOCK_BYTES:
        known = ", ".join(f"{a}.{b}" for a, b in SMEM_PER_BLOCK_BYTES)
        raise ValueError(f"no shared-memory figure for compute capability "
                         f"{capability[0]}.{capability[1]} (table: {known}); pass "
                         "smem_limit_bytes= from cudaDevAttrMaxSharedMemoryPerBlockOptin")
    return (SMEM_PER_BLOCK_BYTES[capability],
            f"compute capability {capability[0]}.{capability[1]}: {SMEM_TABLE_SOURCE}")


def check_config(spec: MatmulSpec, device: str = "auto", *,
                 capability: tuple[int, int] | None = None,
                 smem_limit_bytes: int | None = None) -> dict:
    """Refuse, with a ValueError naming the value, why and what to try, a spec that cannot run
    on `device` (or, given `capability`, on that card); else return the facts a point records.

    `smem_limit_bytes` overrides the shared-memory limit (a card the table lacks). Returns
    {"smem_bytes", "smem_limit_bytes", "smem_limit_source"} for backend="triton", {} otherwise.
    """
    if spec.backend == "torch":
        check_supported(spec.precision, device, capability)
        return {}
    if spec.backend == "cpu_blocked":
        if capability is not None or resolve_device(device) != "cpu":
            raise ValueError("backend='cpu_blocked' is the CPU stand-in and runs on the CPU only; "
                             "on a GPU use backend='triton' (the tile kernel) or 'torch'")
        return {}
    if capability is None:
        device = resolve_device(device)
        interpreted = _interpreter_on()
        if device == "cpu" and not interpreted:
            raise ValueError(_no_gpu_reason())
        if not HAS_TRITON:
            raise ValueError(f"backend='triton' needs Triton: {why_unavailable('triton')}; "
                             "use backend='torch' (cuBLAS) meanwhile")
        if interpreted:
            return _interpreter_facts(spec, device)
    reason = unsupported_reason(spec.precision, device, capability)
    if reason and spec.precision == "fp8":
        reason += ("; fp8 tensor-core instructions arrived with Ada and Hopper (8.9, 9.0): "
                   "Ampere cards such as the A800 and A100 (8.0) have none")
    if reason:
        raise ValueError(reason)
    if smem_limit_bytes is None:
        limit, source = smem_limit(device, capability)
    else:
        limit, source = int(smem_limit_bytes), "given as smem_limit_bytes"
    if spec.smem_bytes > limit:
        raise ValueError(_smem_refusal(spec, limit, source))
    return {"smem_bytes": spec.smem_bytes, "smem_limit_bytes": limit, "smem_limit_source": source}


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
            "imported to check the kernel's results under the Triton interpreter (slow)")


def _interpreter_facts(spec: MatmulSpec, device: str) -> dict:
    """The interpreter runs the kernel with numpy on the host: fp32, fp16 and bf16 only."""
    if device != "cpu":
        raise ValueError("the Triton interpreter is on (TRITON_INTERPRET=1), so kernels run on "
                         "the CPU; use device='cpu', or unset TRITON_INTERPRET to run on the GPU")
    if spec.precision not in ("fp32", "fp16", "bf16"):
        raise ValueError(f"{spec.precision} is a tensor-core format the Triton interpreter "
                         "(numpy on the CPU) cannot reproduce; check 'fp32', 'fp16' or 'bf16' "
                         "there and the rest on a GPU")
    return {"smem_bytes": spec.smem_bytes, "smem_limit_bytes": None,
            "smem_limit_source": "Triton interpreter: no shared memory"}


def _smem_refusal(spec: MatmulSpec, limit: int, source: str) -> str:
    element_bytes = parse_precision(spec.precision).bytes_per_element
    per_stage = (spec.block_m + spec.block_n) * spec.block_k * element_bytes
    fitting = limit // per_stage
    advice = (f"use num_stages={fitting} or fewer, or a smaller block_k" if fitting >= 1 else
              "halve block_k, block_m or block_n")
    return (f"num_stages={spec.num_stages} x (block_m={spec.block_m} + block_n={spec.block_n}) x "
            f"block_k={spec.block_k} x {element_bytes} B ({spec.precision}) = {spec.smem_bytes} B "
            f"({spec.smem_bytes / KIB:g} KiB) of shared memory exceeds the {limit} B "
            f"({limit / KIB:g} KiB) one thread block may use ({source}); {advice}")


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
    return config, source


# Shape multiples that tensor-core paths run fastest at, per input precision: since cuBLAS 11.0
# TensorCores are used for any shape, but the fastest kernels need M, N, K (and the leading
# dimensions) to be multiples of 16 bytes of elements (8 for 16-bit, 4 for tf32, 16 for fp8;
# cuBLAS documentation, "Tensor Core Usage"); A100-class tiles (64/128 wide) fill whole when
# dimensions are multiples of 64.
ALIGNMENT_ELEMENTS = {"fp16": 8, "bf16": 8, "tf32": 4, "fp8": 16}
WHOLE_TILE_MULTIPLE = 64


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
