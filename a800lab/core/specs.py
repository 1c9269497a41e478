"""Datasheet table of NVIDIA GPUs: DENSE peak TFLOP/s per precision (NVIDIA's 2:4-sparsity
headlines halved; fp16/bf16/fp8 with fp32 accumulation; fp64 what DGEMM reaches; None where the
datasheet gives none: nothing derived), memory and NVLink bandwidth, SM counts, arch limits.

    spec = lookup("NVIDIA A800-SXM4-80GB")   # or None (+ a warning) for an unknown card
    peak_for(name, "tf32"); resolve_target("A800"); arch_limits((9, 0))
"""

import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType

PEAK_KEYS = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8")


class UnknownDeviceWarning(UserWarning):
    """A device name that the table does not know; its peaks are unknown, not guessed."""


@dataclass(frozen=True)
class DeviceSpec:
    """One datasheet row. Throughput in TFLOP/s (int8: TOPS), bandwidth in GB/s."""

    name: str
    peak_tflops: Mapping[str, float | None]
    mem_bw_gbs: float
    nvlink_gbs: float | None
    sm_count: int
    memory_gb: float
    source: str
    notes: str = field(default="")
    compute_capability: tuple[int, int] = (0, 0)

    def __post_init__(self) -> None:
        missing = set(PEAK_KEYS) - set(self.peak_tflops)
        extra = set(self.peak_tflops) - set(PEAK_KEYS)
        if missing or extra:
            raise ValueError(f"{self.name}: peak_tflops keys must be exactly {PEAK_KEYS}; "
                             f"missing {sorted(missing)}, unexpected {sorted(extra)}")
        # read-only view so a shared row cannot be edited by one caller for everyone
        object.__setattr__(self, "peak_tflops", MappingProxyType(dict(self.peak_tflops)))

    def __hash__(self) -> int:
        return hash(self.name)

    def to_dict(self) -> dict:
        return {**{f.name: getattr(self, f.name) for f in fields(self)},
                "peak_tflops": dict(self.peak_tflops),
                "compute_capability": list(self.compute_capability)}


def _peaks(**given: float) -> dict:
    return {**dict.fromkeys(PEAK_KEYS), **given}  # None: the datasheet gives none


_FP64_TC = "fp64 is the FP64 tensor-core rate (DGEMM uses it)"
_HALVED = "dense = datasheet sparsity figure / 2"

# --- Ampere GA100: A100 whitepaper (2020) and A100 datasheet (2021), 108 SMs at 1410 MHz ----
_GA100 = _peaks(fp64=19.5, fp32=19.5, tf32=156.0, fp16=312.0, bf16=312.0, int8=624.0)
_A100_SRC = "NVIDIA A100 Tensor Core GPU datasheet (2021) and A100 architecture whitepaper"
# The A800 sources list an 80GB SXM, an 80GB PCIe and a 40GB PCIe part; none found lists an A800
# SXM4 40GB, so the table has no such row and a card by that name is "unknown peak" (measure it
# with `a800lab peak`), not an A100 SXM4 40GB guess.
_A800_SRC = ("NVIDIA A800 datasheets (2022); A800 = A100 compute and memory with NVLink capped "
             "at 400 GB/s")
_AMPERE_NOTE = f"{_FP64_TC}; vector FP64 is 9.7 TFLOP/s"
A100_SXM4_80GB = DeviceSpec("A100 SXM4 80GB", _GA100, 2039.0, 600.0, 108, 80, _A100_SRC,
                            _AMPERE_NOTE, (8, 0))
A100_SXM4_40GB = replace(A100_SXM4_80GB, name="A100 SXM4 40GB", mem_bw_gbs=1555.0, memory_gb=40)
A100_PCIE_80GB = replace(A100_SXM4_80GB, name="A100 PCIe 80GB", mem_bw_gbs=1935.0,
                         notes=_AMPERE_NOTE + "; NVLink via the optional 2-GPU bridge; 300 W "
                         "board power may hold sustained clocks below the SXM part")
A100_PCIE_40GB = replace(A100_PCIE_80GB, name="A100 PCIe 40GB", mem_bw_gbs=1555.0, memory_gb=40)
A800_SXM4_80GB = replace(A100_SXM4_80GB, name="A800 SXM4 80GB", nvlink_gbs=400.0,
                         source=_A800_SRC)
A800_PCIE_80GB = replace(A100_PCIE_80GB, name="A800 PCIe 80GB", nvlink_gbs=400.0,
                         source=_A800_SRC)
A800_PCIE_40GB = replace(A100_PCIE_40GB, name="A800 PCIe 40GB", nvlink_gbs=400.0,
                         source=_A800_SRC)

# --- Hopper GH100: H100 architecture whitepaper (2022) tables, datasheets for H800/H200/NVL -----
_H100_SXM = _peaks(fp64=66.9, fp32=66.9, tf32=494.7, fp16=989.4, bf16=989.4, fp8=1978.9,
                   int8=1978.9)
_H100_PCIE = _peaks(fp64=51.2, fp32=51.2, tf32=378.0, fp16=756.0, bf16=756.0, fp8=1513.0,
                    int8=1513.0)
_NVL = _peaks(fp64=60.0, fp32=60.0, tf32=417.5, fp16=835.5, bf16=835.5, fp8=1670.5,
              int8=1670.5)
_HOPPER_SRC = "NVIDIA H100 Tensor Core GPU architecture whitepaper (2022), dense columns"
H100_SXM5 = DeviceSpec("H100 SXM5 80GB", _H100_SXM, 3350.0, 900.0, 132, 80, _HOPPER_SRC,
                       f"{_FP64_TC}; vector FP64 is 33.5 TFLOP/s", (9, 0))
H100_PCIE = DeviceSpec("H100 PCIe 80GB", _H100_PCIE, 2000.0, 600.0, 114, 80, _HOPPER_SRC,
                       f"{_FP64_TC}; NVLink via the optional bridge", (9, 0))
H100_NVL = DeviceSpec("H100 NVL 94GB", _NVL, 3900.0, 600.0, 132, 94,
                      "NVIDIA H100 NVL datasheet (2023, per-GPU 94 GB edition)",
                      f"{_FP64_TC}; {_HALVED}; NVLink via bridge", (9, 0))
H800_SXM5 = replace(H100_SXM5, name="H800 SXM5 80GB", nvlink_gbs=400.0,
                    peak_tflops={**_H100_SXM, "fp64": 1.0},
                    source="NVIDIA H800 SXM5 datasheet (2023); tensor rates as H100 SXM5",
                    notes="FP64 capped at 1 TFLOP/s and NVLink at 400 GB/s (export variant)")
H800_PCIE = replace(H100_PCIE, name="H800 PCIe 80GB", nvlink_gbs=400.0,
                    peak_tflops={**_H100_PCIE, "fp64": 0.8},
                    source="NVIDIA H800 PCIe datasheet (2023); tensor rates as H100 PCIe",
                    notes="FP64 capped at 0.8 TFLOP/s; NVLink bridge capped at 400 GB/s")
H200_SXM = replace(H100_SXM5, name="H200 SXM 141GB", mem_bw_gbs=4800.0, memory_gb=141,
                   source="NVIDIA H200 datasheet (2024); same GH100 compute as H100 SXM5",
                   notes=f"{_FP64_TC}; HBM3e")
H200_NVL = replace(H100_NVL, name="H200 NVL 141GB", mem_bw_gbs=4800.0, memory_gb=141,
                   nvlink_gbs=900.0, source="NVIDIA H200 NVL datasheet (2024)",
                   notes=f"{_FP64_TC}; {_HALVED}; NVLink via 2- or 4-way bridge")

# --- Ada, Ampere GA10x, Turing, Volta ----------------------------------------------------------
L40S = DeviceSpec("L40S 48GB", _peaks(fp32=91.6, tf32=183.0, fp16=362.05, bf16=362.05,
                                      fp8=733.0, int8=733.0),
                  864.0, None, 142, 48, "NVIDIA L40S datasheet (2023)",
                  f"{_HALVED}; FP64 not published", (8, 9))
L4 = DeviceSpec("L4 24GB", _peaks(fp32=30.3, tf32=60.0, fp16=121.0, bf16=121.0, fp8=242.5,
                                  int8=242.5),
                300.0, None, 58, 24, "NVIDIA L4 datasheet (2023)", f"{_HALVED}; FP64 not published",
                (8, 9))
A10 = DeviceSpec("A10 24GB", _peaks(fp32=31.2, tf32=62.5, fp16=125.0, bf16=125.0, int8=250.0),
                 600.0, None, 72, 24, "NVIDIA A10 datasheet (2021)",
                 f"{_HALVED}; FP64 not published", (8, 6))
RTX_4090 = DeviceSpec("GeForce RTX 4090 24GB",
                      _peaks(fp32=82.6, tf32=82.6, fp16=165.2, bf16=165.2, fp8=330.3,
                             int8=660.6),
                      1008.0, None, 128, 24,
                      "NVIDIA Ada Lovelace architecture whitepaper (2022), appendix table",
                      "fp16/bf16/fp8 with FP32 accumulate (torch's mode); FP16 accumulate runs "
                      "at 2x (fp16 330.3, fp8 660.6); FP64 not published", (8, 9))
T4 = DeviceSpec("T4 16GB", _peaks(fp32=8.1, fp16=65.0, int8=130.0), 320.0, None, 40, 16,
                "NVIDIA T4 datasheet (2019)",
                "fp16 is mixed precision (FP32 accumulate); no bf16/tf32/fp8; FP64 not published",
                (7, 5))
V100_SXM2_32GB = DeviceSpec("V100 SXM2 32GB", _peaks(fp64=7.8, fp32=15.7, fp16=125.0),
                            900.0, 300.0, 80, 32, "NVIDIA V100 datasheet (2020)",
                            "fp16 is the tensor-core (mixed precision) rate; no bf16/tf32/fp8; "
                            "int8 (DP4A) not published", (7, 0))
V100_SXM2_16GB = replace(V100_SXM2_32GB, name="V100 SXM2 16GB", memory_gb=16)
V100_PCIE_32GB = replace(V100_SXM2_32GB, name="V100 PCIe 32GB", nvlink_gbs=None,
                         peak_tflops=_peaks(fp64=7.0, fp32=14.0, fp16=112.0))
V100_PCIE_16GB = replace(V100_PCIE_32GB, name="V100 PCIe 16GB", memory_gb=16)
V100S_PCIE = replace(V100_PCIE_32GB, name="V100S PCIe 32GB", mem_bw_gbs=1134.0,
                     peak_tflops=_peaks(fp64=8.2, fp32=16.4, fp16=130.0))

# (regex on the upper-cased torch/NVML name, row). Most specific first: the first match wins.
# torch/NVML spell the same card several ways ("A100-PCIE-40GB", "A100 80GB PCIe"), so the
# memory size and the form factor are matched in either order.
_PCIE = r"(?:PCIE|ACTIVE)"  # "A800 40GB Active" is the PCIe card's product name


def _gb(size: int) -> str:
    return rf"(?<!\d){size}\s?GB"


def _either(a: str, b: str) -> str:
    return rf"(?:{a}.*{b}|{b}.*{a})"


_GB40, _GB80 = _gb(40), _gb(80)


_RULES: tuple[tuple[str, DeviceSpec], ...] = (
    (rf"\bA800\b.*SXM.*{_GB80}", A800_SXM4_80GB),
    (rf"\bA800\b.*{_either(_PCIE, _GB80)}", A800_PCIE_80GB),
    (rf"\bA800\b.*{_either(_PCIE, _GB40)}", A800_PCIE_40GB),
    (rf"\bA100\b.*SXM.*{_GB80}", A100_SXM4_80GB),
    (rf"\bA100\b.*SXM.*{_GB40}", A100_SXM4_40GB),
    (rf"\bA100\b.*{_either(_PCIE, _GB80)}", A100_PCIE_80GB),
    (rf"\bA100\b.*{_either(_PCIE, _GB40)}", A100_PCIE_40GB),
    (r"\bH800\b.*PCIE", H800_PCIE),
    (r"\bH800\b", H800_SXM5),           # the SXM5 part reports plain "NVIDIA H800"
    (r"\bH100\b.*\bNVL\b", H100_NVL),
    (r"\bH100\b.*PCIE", H100_PCIE),
    (r"\bH100\b.*(?:SXM|HBM3)", H100_SXM5),  # "NVIDIA H100 80GB HBM3"; PCIe has HBM2e
    (r"\bH200\b.*\bNVL\b", H200_NVL),
    (r"\bH200\b", H200_SXM),            # \b keeps "GH200" (Grace Hopper) out
    (r"\bL40S\b", L40S),
    (r"\bL4\b", L4),                    # \b keeps "L40"/"L40S" out
    (r"\bA10\b", A10),                  # \b keeps "A100" and "A10G" out
    (r"RTX 4090$", RTX_4090),           # "$" keeps "4090 D" and "4090 Laptop GPU" out
    (r"\bT4\b", T4),
    (rf"\bV100-SXM2.*{_gb(32)}", V100_SXM2_32GB),
    (rf"\bV100-SXM2.*{_gb(16)}", V100_SXM2_16GB),
    (rf"\bV100-PCIE.*{_gb(32)}", V100_PCIE_32GB),
    (rf"\bV100-PCIE.*{_gb(16)}", V100_PCIE_16GB),
    (r"\bV100S-PCIE", V100S_PCIE),
)
_COMPILED = tuple((re.compile(pattern), spec) for pattern, spec in _RULES)
SPECS: tuple[DeviceSpec, ...] = tuple(dict.fromkeys(spec for _, spec in _RULES))  # each row once


def all_specs() -> tuple[DeviceSpec, ...]:
    """Every row of the table, once each, in the order of the name rules."""
    return SPECS


def match(device_name: str) -> DeviceSpec | None:
    """The table row for `device_name`, or None; never warns (see `lookup`)."""
    name = " ".join(device_name.upper().split())
    if re.search(r"\bMIG\b", name):
        return None  # a MIG slice has a fraction of the SMs; the whole-GPU row would mislead
    for pattern, spec in _COMPILED:
        if pattern.search(name):
            return spec
    return None


def lookup(device_name: str) -> DeviceSpec | None:
    """Datasheet row for a torch/NVML device name; None plus an UnknownDeviceWarning if unknown."""
    spec = match(device_name)
    if spec is None:
        warnings.warn(_unknown_reason(device_name), UnknownDeviceWarning, stacklevel=2)
    return spec


def peak_for(device_name: str, precision: str) -> tuple[float | None, str]:
    """(dense datasheet peak, source) for a device and precision; (None, reason) when unknown."""
    if precision not in PEAK_KEYS:
        raise ValueError(f"unknown precision {precision!r}: use one of {PEAK_KEYS}")
    spec = match(device_name)
    if spec is None:
        return None, _unknown_reason(device_name)
    value = spec.peak_tflops[precision]
    if value is None:
        return None, (f"{spec.name}: no dense {precision} peak (the format is unsupported or the "
                      f"datasheet does not publish it; {spec.source})")
    return value, f"{spec.name}: {spec.source}"


def _unknown_reason(device_name: str) -> str:
    if re.search(r"\bMIG\b", device_name.upper()):
        return (f"{device_name!r} is a MIG slice: its peak is a fraction of the whole GPU's; "
                "use a800lab.workloads.peak.measure_peak() to measure it")
    return (f"no datasheet row for device {device_name!r}; its peak is unknown (not guessed). "
            "Use a800lab.workloads.peak.measure_peak() to measure an achievable peak on the spot")


# ---- what one SM of each architecture holds ---------------------------------------------------
KIB = 1024
ARCH_SOURCE = ("CUDA C++ Programming Guide, Technical Specifications per Compute Capability; "
               "register allocation as in CUDA's occupancy calculator (cuda_occupancy.h)")


@dataclass(frozen=True)
class ArchLimits:
    """Per-SM and per-block limits of one compute capability (bytes, registers, warps)."""

    capability: tuple[int, int]
    smem_per_block_optin_bytes: int   # cudaDevAttrMaxSharedMemoryPerBlockOptin
    smem_per_sm_bytes: int            # the largest shared-memory carve-out of an SM
    smem_reserved_per_block_bytes: int  # the driver's own 1 KiB per block from sm_80 on
    max_warps_per_sm: int
    max_blocks_per_sm: int
    registers_per_sm: int = 65536
    registers_per_block: int = 65536
    max_registers_per_thread: int = 255
    register_unit: int = 256          # registers are given to a warp in units of 256
    sub_partitions: int = 4           # ... in each of an SM's 4 quarters
    smem_unit_bytes: int = 128        # shared memory is given to a block in units of 128 B

    @property
    def sm(self) -> str:
        return f"sm_{self.capability[0]}{self.capability[1]}"


_ARCH = (
    ArchLimits((7, 0), 96 * KIB, 96 * KIB, 0, 64, 32),      # V100
    ArchLimits((7, 5), 64 * KIB, 64 * KIB, 0, 32, 16),      # T4, RTX 20xx
    ArchLimits((8, 0), 163 * KIB, 164 * KIB, KIB, 64, 32),  # A100, A800
    ArchLimits((8, 6), 99 * KIB, 100 * KIB, KIB, 48, 16),   # A10, RTX 30xx
    ArchLimits((8, 7), 163 * KIB, 164 * KIB, KIB, 48, 16),  # Jetson Orin
    ArchLimits((8, 9), 99 * KIB, 100 * KIB, KIB, 48, 24),   # L4, L40S, RTX 40xx
    ArchLimits((9, 0), 227 * KIB, 228 * KIB, KIB, 64, 32),  # H100, H800, H200
    ArchLimits((10, 0), 227 * KIB, 228 * KIB, KIB, 64, 32),  # B200
    ArchLimits((12, 0), 99 * KIB, 100 * KIB, KIB, 48, 32),  # RTX 50xx
)
ARCH_LIMITS: Mapping[tuple[int, int], ArchLimits] = MappingProxyType(
    {limits.capability: limits for limits in _ARCH})


def arch_limits(capability: tuple[int, int]) -> ArchLimits:
    """The limits of compute capability `capability`; ValueError naming the ones known."""
    capability = (int(capability[0]), int(capability[1]))
    if capability not in ARCH_LIMITS:
        known = ", ".join(f"{a}.{b}" for a, b in ARCH_LIMITS)
        raise ValueError(f"no limits for compute capability {capability[0]}.{capability[1]} "
                         f"(the table has {known})")
    return ARCH_LIMITS[capability]


@dataclass(frozen=True)
class Target:
    """A card to plan for: its name as given, compute capability, SM count (None when the
    name covers cards that differ, e.g. "H100": SXM 132, PCIe 114) and datasheet row."""

    name: str
    capability: tuple[int, int]
    sm_count: int | None
    spec: DeviceSpec | None = None

    @property
    def sm(self) -> str:
        return f"sm_{self.capability[0]}{self.capability[1]}"

    @property
    def label(self) -> str:
        return self.sm if self.name == self.sm else f"{self.name} ({self.sm})"


def family_rows(card: str) -> tuple[DeviceSpec, ...]:
    """The rows a card name means: its own ("NVIDIA A800-SXM4-80GB") or its family's ("A800")."""
    spec = match(card)
    if spec is not None:
        return (spec,)
    family = " ".join(card.upper().split())
    return tuple(row for row in all_specs() if row.name.upper().startswith(family + " "))


def resolve_target(name: str) -> Target:
    """A card name or family of the table ("A800", "H100 SXM5 80GB") or an architecture
    ("sm_80", "sm_90", "8.9") as a Target; ValueError saying what is accepted."""
    text = str(name).strip()
    found = re.fullmatch(r"(?:sm_?|compute_?)?(\d{1,2})\.?(\d)", text.lower())
    capability = (int(found[1]), int(found[2])) if found else None
    if capability in ARCH_LIMITS:
        return Target(ARCH_LIMITS[capability].sm, capability, None)
    rows = family_rows(text) if text else ()
    capabilities = {row.compute_capability for row in rows}
    if len(capabilities) == 1:
        counts = {row.sm_count for row in rows}
        return Target(text, capabilities.pop(), counts.pop() if len(counts) == 1 else None,
                      rows[0] if len(rows) == 1 else None)
    cards = sorted({row.name.split()[0] for row in all_specs()})
    raise ValueError(f"unknown target {name!r}: give a card of the datasheet table "
                     f"({', '.join(cards)}) or an architecture such as sm_80 (A800/A100) or "
                     "sm_90 (H100/H200)")
