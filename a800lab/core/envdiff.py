"""Compare two machines: two results files or doctor reports (either kind), field by field, and
the same configs' throughputs side by side as B / A (`python -m a800lab diff A B`).

    d = diff_files("a800/runs.jsonl", "h200/doctor.json")
    d.differences, d.only_a, d.only_b, d.lineup, d.notes; print(format_diff(d))
"""

import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .cuda_compat import cuda_runtime_problem
from .device import compact_ranges
from .doctor import table_lines, with_defaults
from .noise import quartiles
from .nvml import is_not_available
from .results import Record, read_records

# field -> (label, what a difference means). Order: hardware, software, settings, host.
FIELDS: dict[str, tuple[str, str]] = {
    "mode": ("mode", "One side ran in CPU fallback: its numbers teach the method and say nothing "
             "about a GPU."),
    "device_name": ("measured device", "The points ran on different devices: the throughput "
                    "ratio is a hardware comparison, not a software one."),
    "gpu_model": ("GPU model", "Different GPU models: throughputs differ by design; compare each "
                  "with its own datasheet (% of peak), not with each other."),
    "gpu_count": ("GPU count", "A different number of GPUs (NVML's count; CUDA_VISIBLE_DEVICES "
                  "may hide some from torch): multi-GPU results and the default world size "
                  "differ."),
    "compute_capability": ("compute capability", "Different architectures (8.0 Ampere "
                           "A100/A800, 9.0 Hopper H100/H800/H200): other TensorCores, fp8 only "
                           "from 8.9, NVML's power reading averaged over 1 s on Hopper."),
    "sm_clock_max_mhz": ("max SM clock (MHz)", "Different maximum SM clocks: another SKU (PCIe "
                         "vs SXM) or clocks capped by an administrator (nvidia-smi -q -d CLOCK); "
                         "peak matmul throughput scales with it."),
    "mem_clock_max_mhz": ("max memory clock (MHz)", "Different memory clocks: memory bandwidth "
                          "scales with it (another HBM generation or SKU)."),
    "power_limit_w": ("power limit (W)", "Different power limits (nvidia-smi -q -d POWER): a "
                      "lower limit holds heavy matmuls at sw_power_cap and lowers sustained "
                      "throughput and energy per sample."),
    "ecc_enabled": ("ECC", "ECC on one side only: ECC costs a little memory and bandwidth and "
                    "catches memory errors; production GPUs keep it on."),
    "ecc_uncorrected": ("uncorrected ECC errors (lifetime)", "A GPU has had uncorrected memory "
                        "errors: check nvidia-smi -q -d ECC,ROW_REMAPPER and drain it if they "
                        "grow (python -m a800lab health)."),
    "mig_enabled": ("MIG", "MIG on one side: CUDA sees slices of a GPU, and numbers measured "
                    "there describe one slice."),
    "throttle_reasons": ("throttle reasons (snapshot)", "Clocks held back when the report was "
                         "taken on one side (power cap, heat): see doctor's advice; a snapshot, "
                         "so compare reports taken under the same load."),
    "pcie": ("PCIe link", "Different PCIe links: host-device copies differ; a link below its "
             "maximum (e.g. gen4 x8 on an x16 card) points to a seating or riser problem."),
    "nvlink_active_links": ("active NVLinks", "Different numbers of active NVLinks: GPU-GPU "
                            "bandwidth differs (A800 SXM: 8 links, A100: 12; a link that is down "
                            "shows as fewer)."),
    "topology": ("GPU topology", "Different GPU-GPU link classes (nvidia-smi topo -m): "
                 "collectives take different paths and reach different bandwidths."),
    "numa_node": ("GPU NUMA nodes", "The GPUs hang off different NUMA nodes: bind each process "
                  "to its GPU's node (numactl --cpunodebind=N --membind=N), or host-device "
                  "copies cross the socket link."),
    "cpu_affinity": ("GPU CPU affinity", "Different CPUs sit next to the GPUs: a binding copied "
                     "from one machine (taskset, numactl) is wrong on the other."),
    "driver": ("NVIDIA driver", "Different NVIDIA drivers: the newest CUDA each supports, bug "
               "fixes and NVLink/NCCL behaviour differ; keep one driver across a cluster."),
    "cuda_driver": ("CUDA the driver supports", "The drivers support different CUDA versions: "
                    "within one major release a newer runtime still runs (minor version "
                    "compatibility, without JIT of newer PTX); across major releases it needs a "
                    "newer driver."),
    "torch": ("torch", "Different torch releases: kernels, defaults and the libraries they "
              "bundle differ; pin one (a lock file or a container image)."),
    "torch_cuda": ("torch's CUDA runtime", "torch was built against different CUDA runtimes: "
                   "cuBLAS and cuDNN kernels differ; a runtime newer than the driver's CUDA "
                   "runs within its major release (minor version compatibility)."),
    "cudnn": ("cuDNN", "Different cuDNN builds: convolution algorithms and their speed differ."),
    "nccl": ("NCCL", "Different NCCL builds: collective algorithms and transports differ; ranks "
             "of one job on different NCCL versions can hang or fail."),
    "matmul_fp32_precision": ("float32 matmuls", "float32 matmuls run as TF32 on one side and "
                              "IEEE fp32 on the other: several times faster, ~1e-3 relative "
                              "error; set torch.backends.cuda.matmul.fp32_precision alike "
                              "(chapter 03)."),
    "conv_fp32_precision": ("float32 convolutions", "float32 convolutions run as TF32 on one "
                            "side only: set torch.backends.cudnn.conv.fp32_precision alike."),
    "python": ("Python", "Different Python versions: rarely a speed difference, but other wheels "
               "and package versions."),
    "platform": ("OS / kernel", "Different operating systems or kernels: driver modules, IOMMU "
                 "and huge-page settings may differ."),
    "hostname": ("host", "Different machines (expected when comparing two boxes)."),
    "cpu_model": ("host CPU", "Different host CPUs: data loading, launch overhead and CPU "
                  "fallback numbers differ."),
    "logical_cores": ("logical CPU cores", "A different number of CPU cores: data-loader "
                      "workers and CPU threads must be sized per machine."),
    "numa_nodes": ("NUMA nodes", "A different number of NUMA nodes: process binding differs."),
    "host_memory_gib": ("host memory (GiB)", "Different host memory: pinned buffers and "
                        "data-loader caches have a different budget."),
    "torch_threads": ("torch CPU threads", "Different torch CPU thread counts: CPU numbers are "
                      "not comparable (and a GPU job's CPU side differs)."),
}
# a doctor report's "environ" (core.nccl_env.settings_that_matter), compared variable by variable
ENVIRON = ("Set differently on each side, a variable NCCL, gloo, CUDA, OpenMP, torch or the "
           "dynamic loader reads makes the same job behave differently (transports, threads, "
           "visible GPUs, libraries): set it alike.")
# the environment keys of a result record -> field
_ENV_FIELDS = {"mode": "mode", "device_name": "device_name", "device_count": "gpu_count",
               "driver": "driver", "torch": "torch", "cuda": "torch_cuda", "cudnn": "cudnn",
               "nccl": "nccl", "python": "python", "platform": "platform",
               "hostname": "hostname", "cpu_model": "cpu_model",
               "matmul_fp32_precision": "matmul_fp32_precision",
               "conv_fp32_precision": "conv_fp32_precision"}
# a doctor report's system and cpu keys -> field
_REPORT_SYSTEM_FIELDS = {
    "driver": "driver_version", "cuda_driver": "cuda_driver_version", "torch": "torch_version",
    "torch_cuda": "torch_cuda_version", "cudnn": "cudnn_version", "nccl": "nccl_version",
    "matmul_fp32_precision": "matmul_fp32_precision",
    "conv_fp32_precision": "conv_fp32_precision"}
_REPORT_CPU_FIELDS = {"cpu_model": "model", "logical_cores": "logical_cores",
                      "numa_nodes": "numa_nodes"}
_PER_GPU = ("compute_capability", "sm_clock_max_mhz", "mem_clock_max_mhz", "power_limit_w",
            "ecc_enabled", "mig_enabled", "throttle_reasons", "nvlink_active_links",
            "numa_node", "cpu_affinity")
NA = "n/a"  # a value NVML or torch could not give (its reason is dropped: it varies by box)
UNSET = "(unset)"  # an environment variable one side does not set


@dataclass(frozen=True)
class Side:
    """One file's environment as flat facts, and its result records (none for a report)."""

    path: str
    kind: str                   # "results" or "doctor report"
    facts: dict
    records: tuple = ()         # the records of the environment compared (results only)
    notes: tuple = ()           # what else the file holds, what looks inconsistent

    def describe(self) -> str:
        what = f"results, {len(self.records)} records" if self.kind == "results" else self.kind
        device = self.facts.get("device_name") or self.facts.get("gpu_model") or "no GPU"
        host = self.facts.get("hostname")
        return f"{self.path} ({what}; {_show(device)}" + (f", host {host})" if host else ")")


@dataclass(frozen=True)
class Difference:
    """A field whose values differ, or that one side lacks (a or b is None then)."""

    field: str
    label: str
    a: Any
    b: Any
    meaning: str


@dataclass(frozen=True)
class LineupRow:
    """One config measured on both sides: the newest ok record of each, B / A."""

    workload: str
    params: dict
    unit: str
    a_throughput: float
    b_throughput: float
    a_noisy: bool
    b_noisy: bool
    a_quartiles_ms: tuple[float, float] | None = None  # 25th and 75th percentile per call
    b_quartiles_ms: tuple[float, float] | None = None

    @property
    def ratio(self) -> float:
        return self.b_throughput / self.a_throughput

    @property
    def within_spread(self) -> bool:
        """Whether B / A = 1 lies inside what the two sides' middle halves allow
        (A's q25/B's q75 .. A's q75/B's q25): a difference the timings cannot tell from none."""
        if self.a_quartiles_ms is None or self.b_quartiles_ms is None:
            return False
        (a25, a75), (b25, b75) = self.a_quartiles_ms, self.b_quartiles_ms
        return b25 > 0 and b75 > 0 and a25 / b75 <= 1.0 <= a75 / b25


@dataclass(frozen=True)
class EnvDiff:
    """What differs between sides a and b (see the module docstring)."""

    a: Side
    b: Side
    differences: list[Difference] = field(default_factory=list)
    only_a: list[Difference] = field(default_factory=list)
    only_b: list[Difference] = field(default_factory=list)
    same: list[str] = field(default_factory=list)
    lineup: list[LineupRow] = field(default_factory=list)
    unmatched: tuple[int, int] = (0, 0)  # configs measured on one side only: (a, b)

    @property
    def notes(self) -> list[str]:
        return [f"A: {n}" for n in self.a.notes] + [f"B: {n}" for n in self.b.notes]

    @property
    def same_environment(self) -> bool:
        """Both sides the same machine and software (no difference in the compared fields):
        then every B / A is run-to-run variation, the baseline other comparisons must exceed."""
        return not self.differences and not self.only_a and not self.only_b

    @property
    def geomean_ratio(self) -> float | None:
        """Geometric mean of the lineup's B / A, None without a lineup."""
        if not self.lineup:
            return None
        return math.exp(statistics.fmean(math.log(r.ratio) for r in self.lineup))

    def to_dict(self) -> dict:
        def side(s: Side) -> dict:
            return {"path": s.path, "kind": s.kind, "facts": s.facts, "notes": list(s.notes),
                    "records": len(s.records)}
        return {"a": side(self.a), "b": side(self.b),
                "differences": [asdict(d) for d in self.differences],
                "only_a": [asdict(d) for d in self.only_a],
                "only_b": [asdict(d) for d in self.only_b], "same": self.same,
                "lineup": [{**asdict(r), "ratio": r.ratio} for r in self.lineup],
                "unmatched": {"a": self.unmatched[0], "b": self.unmatched[1]},
                "geomean_ratio": self.geomean_ratio, "notes": self.notes}


# ---- reading a side ----------------------------------------------------------------------------
def load_side(path: str | Path) -> Side:
    """A results file (JSON Lines) or a doctor report (one JSON object), as a Side."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{str(p)!r} is not a file: give a results file (--out of a sweep) or "
                         "a doctor report (python -m a800lab doctor --json > doctor.json)")
    text = p.read_text(encoding="utf-8", errors="replace")
    if not text.strip():
        raise ValueError(f"{p} is empty: nothing to compare")
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None  # several JSON lines: a results file
        first = next((line for line in text.splitlines() if line.strip()), "")
        try:
            json.loads(first)
        except ValueError:
            raise ValueError(f"{p} is neither a results file (JSON Lines from a sweep) nor a "
                             "doctor report (python -m a800lab doctor --json)") from None
    if isinstance(whole, dict) and "gpus" in whole and "system" in whole:
        return side_from_report(whole, str(p))
    if isinstance(whole, dict) and "schema_version" not in whole:
        raise ValueError(f"{p}: a JSON object that is neither a doctor report nor a result "
                         "record; diff compares results files and `doctor --json` reports")
    return side_from_records(read_records(p), str(p))


def side_from_records(records: list[Record], path: str = "results") -> Side:
    """The environment of the newest record's machine, with that machine's records."""
    if not records:
        raise ValueError(f"{path}: no records to compare; run a sweep into it first")
    newest = max(records, key=lambda r: r.timestamp)
    chosen = newest.env.get("fingerprint", "")
    mine = [r for r in records if r.env.get("fingerprint", "") == chosen]
    notes = []
    others = sorted({r.env.get("fingerprint", "") for r in records} - {chosen})
    if others:
        notes.append(f"holds records of {len(others) + 1} environments; compared: the newest "
                     f"({chosen or 'no fingerprint'}, {len(mine)} records), ignored: "
                     f"{len(records) - len(mine)} records of {', '.join(o or '?' for o in others)}"
                     "; split the file to compare those")
    facts = {key: _plain(newest.env.get(env_key))
             for env_key, key in _ENV_FIELDS.items() if env_key in newest.env}
    threads = newest.conditions.get("torch_threads")
    if threads is not None and facts.get("mode") == "CPU fallback":
        facts["torch_threads"] = threads
    return Side(path, "results", {k: v for k, v in facts.items() if k in FIELDS},
                tuple(mine), tuple(notes))


def side_from_report(report: dict, path: str = "doctor report") -> Side:
    """A doctor report (build_report, or its JSON saved by any a800lab) as flat facts."""
    report = with_defaults(report)
    system, cpu, gpus = report["system"], report.get("cpu") or {}, report["gpus"]
    facts: dict[str, Any] = {
        "mode": "GPU" if report["gpu_found"] else "CPU fallback", "gpu_count": len(gpus),
        **{key: _plain(system.get(name)) for key, name in _REPORT_SYSTEM_FIELDS.items()},
        **{key: _plain(cpu.get(name)) for key, name in _REPORT_CPU_FIELDS.items()},
    }
    memory = _plain(cpu.get("memory_total_bytes"))
    if isinstance(memory, int | float):
        facts["host_memory_gib"] = round(memory / 2**30)
    if gpus:
        facts["gpu_model"] = [_plain(g["name"]) for g in gpus]
        for key in _PER_GPU:
            facts[key] = [_plain(g.get(key)) for g in gpus]
        facts["ecc_uncorrected"] = [
            _plain((g.get("ecc_errors") or {}).get("aggregate_uncorrected")) for g in gpus]
        facts["pcie"] = [f"gen{_plain(g.get('pcie_gen'))} x{_plain(g.get('pcie_width'))}"
                         for g in gpus]
    if report.get("topology"):
        facts["topology"] = [" ".join(row) for row in report["topology"]["matrix"]]
    if "environ" in report:  # reports before it have none
        facts["environ"] = dict(report["environ"])
    # a problem within one side: torch's CUDA beyond what the driver runs
    problem = cuda_runtime_problem(facts.get("torch_cuda"), facts.get("cuda_driver"),
                                   facts.get("driver"))
    return Side(path, "doctor report", facts, (), (problem,) if problem else ())


def _plain(value: Any) -> Any:
    """A JSON value to compare: NotAvailable -> "n/a", tuples -> lists."""
    if is_not_available(value):
        return NA
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


# ---- comparing ---------------------------------------------------------------------------------
def diff_sides(a: Side, b: Side) -> EnvDiff:
    """Every field of FIELDS that a or b has: differing, one side only, or the same."""
    differences, only_a, only_b, same = [], [], [], []
    for key, (label, meaning) in FIELDS.items():
        in_a, in_b = key in a.facts, key in b.facts
        if not (in_a or in_b):
            continue
        va, vb = a.facts.get(key), b.facts.get(key)
        if in_a and in_b:
            if va == vb:
                same.append(key)
            else:
                differences.append(Difference(key, label, va, vb, meaning))
            continue
        lacking = b if in_a else a
        why = ("results files do not record it: save `python -m a800lab doctor --json` beside "
               "them and diff those" if lacking.kind == "results"
               else "the other file does not record it")
        (only_a if in_a else only_b).append(
            Difference(key, label, va, vb, f"{meaning} (Recorded on one side only: {why}.)"))
    if "environ" in a.facts and "environ" in b.facts:
        differences += _variables(a.facts["environ"], b.facts["environ"])
    rows, unmatched = lineup(a.records, b.records)
    return EnvDiff(a, b, differences, only_a, only_b, same, rows, unmatched)


def _variables(a: dict, b: dict) -> list[Difference]:
    """One Difference per variable set differently (or on one side only) in a and b."""
    from .nccl_env import NCCL_VARIABLES

    what = {v.name: v.what for v in NCCL_VARIABLES}
    return [Difference(f"environ.{name}", name, a.get(name, UNSET), b.get(name, UNSET),
                       f"{name}: {what[name]}. {ENVIRON}" if name in what else ENVIRON)
            for name in sorted({*a, *b}) if a.get(name) != b.get(name)]


def diff_files(a: str | Path, b: str | Path) -> EnvDiff:
    """diff_sides of two files, each a results file or a doctor report."""
    return diff_sides(load_side(a), load_side(b))


def _newest_ok(records) -> dict[str, Record]:
    best: dict[str, Record] = {}
    for r in records:
        if r.outcome == "ok" and (r.point_key() not in best or
                                  r.timestamp > best[r.point_key()].timestamp):
            best[r.point_key()] = r
    return best


def _middle_half(samples_ms) -> tuple[float, float] | None:
    """(q25, q75) of the samples (core.noise.quartiles), None for fewer than two."""
    return quartiles(samples_ms)[::2] if len(samples_ms) >= 2 else None


def lineup(a_records, b_records) -> tuple[list[LineupRow], tuple[int, int]]:
    """The configs measured ok on both sides (same workload, params and unit), in A's order,
    and how many were measured on one side only."""
    a_best, b_best = _newest_ok(a_records), _newest_ok(b_records)
    rows = []
    for key, ra in a_best.items():
        rb = b_best.get(key)
        if rb is None or rb.throughput_unit != ra.throughput_unit:
            continue
        rows.append(LineupRow(ra.workload, dict(ra.params), ra.throughput_unit,
                              float(ra.throughput), float(rb.throughput),
                              bool(ra.noise.get("noisy")), bool(rb.noise.get("noisy")),
                              _middle_half(ra.time_ms), _middle_half(rb.time_ms)))
    matched = len(rows)
    return rows, (len(a_best) - matched, len(b_best) - matched)


# ---- text --------------------------------------------------------------------------------------
def _compact(values: list) -> str:
    """Per-GPU values as "400 x8", or "350 on GPU 0,2; 400 on GPU 1,3-7"."""
    groups: dict[str, list[int]] = {}
    for i, v in enumerate(values):
        groups.setdefault(_show(v), []).append(i)
    if len(groups) == 1:
        (text, idx), = groups.items()
        return f"{text} x{len(idx)}" if len(idx) > 1 else text
    return "; ".join(f"{text} on GPU {compact_ranges(idx)}" for text, idx in groups.items())


def _show(value: Any) -> str:
    if value is None:
        return "(not recorded)"
    if isinstance(value, list) and value and not all(isinstance(v, list) for v in value):
        return _compact(value)
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]" if value else "none"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def show_value(key: str, value: Any) -> str:
    """A field's value as text: per-GPU lists compacted, the topology matrix row by row."""
    if key == "topology" and isinstance(value, list):
        return " / ".join(value)
    return _show(value)


def format_params(params: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


def format_diff(d: EnvDiff, width: int = 100) -> str:
    """The diff as text: the two sides, differences with their meaning, one-sided fields,
    the fields that agree, consistency notes and the throughput lineup."""
    import textwrap

    def wrap(text: str) -> list[str]:
        return textwrap.wrap(text, width, initial_indent="      ", subsequent_indent="      ")

    out = [f"A: {d.a.describe()}", f"B: {d.b.describe()}", ""]
    out.append(f"Differences ({len(d.differences)}):" if d.differences else
               "Differences: none in the fields both sides record.")
    for diff in d.differences:
        out.append(f"  {diff.label}: A {show_value(diff.field, diff.a)} | "
                   f"B {show_value(diff.field, diff.b)}")
        out += wrap(diff.meaning)
    for name, items in (("A", d.only_a), ("B", d.only_b)):
        if items:
            out.append(f"Recorded only in {name} ({len(items)}): "
                       + ", ".join(f"{i.label} = {show_value(i.field, i.a or i.b)}"
                                   for i in items))
    if d.only_a or d.only_b:
        out += wrap("Results files record the software and the device; clocks, power limit, "
                    "ECC, MIG, TF32 and NUMA binding are in doctor reports: save "
                    "`python -m a800lab doctor --json > doctor.json` beside each results file.")
    if d.same:
        out += textwrap.wrap("Same: " + ", ".join(FIELDS[k][0] for k in d.same), width,
                             subsequent_indent="      ")
    if d.notes:
        out.append("Notes:")
        out += [f"  - {n}" for n in d.notes]
    if d.a.kind == "results" and d.b.kind == "results":
        out += ["", *_lineup_lines(d)]
    return "\n".join(out)


def _lineup_lines(d: EnvDiff) -> list[str]:
    if not d.lineup:
        return [f"Throughput: no config was measured ok on both sides ({d.unmatched[0]} only "
                f"in A, {d.unmatched[1]} only in B); run the same sweep on both machines."]
    rows = [(r.workload, format_params(r.params),
             f"{r.a_throughput:.4g}{'!' * r.a_noisy}", f"{r.b_throughput:.4g}{'!' * r.b_noisy}",
             r.unit, f"{r.ratio:.2f}x{'~' * (d.same_environment or r.within_spread)}")
            for r in d.lineup]
    same = "; A and B are the same environment: every B/A is run-to-run variation"
    lines = ["Throughput, same configs (newest ok record of each side; ! = noisy; ~ = no "
             f"difference the timings can tell{same * d.same_environment}):"]
    lines += ["  " + line for line in table_lines(
        ["workload", "params", "A", "B", "unit", "B/A"], rows)]
    lines.append(f"  geometric mean B/A over {len(d.lineup)} configs: {d.geomean_ratio:.2f}x; "
                 f"{d.unmatched[0]} configs only in A, {d.unmatched[1]} only in B")
    return lines
