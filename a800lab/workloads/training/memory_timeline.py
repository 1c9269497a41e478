"""One training step's memory over time by what it holds (parameter, optimizer_state, input,
temporary, activation, gradient, autograd_detail; unknown: torch could not tell), from torch's
own memory profiler: the numbers `torch.profiler.profile.export_memory_timeline` draws.

    timeline = step_memory_timeline(trainer, trainer.pool(), "cpu")
    timeline.peak_bytes, timeline.at_peak          # {"parameter": 104488, "gradient": ...}

torch keeps that profiler in a private module (torch.profiler._memory_profiler);
`category_timeline` is the one function that touches it.
"""

from dataclasses import asdict, dataclass

import torch
from torch.profiler import ProfilerActivity
from torch.profiler import profile as torch_profile

from ...core.units import format_bytes

TESTED_TORCH = "2.4 to 2.15"  # the releases whose private memory profiler this reads


def category_timeline(prof: torch_profile, device: str) -> tuple[list[int], dict[str, list[int]]]:
    """(times in us, bytes per category at each time) on `device` ("cpu", "cuda:0") of a
    finished profile taken with record_shapes, profile_memory and with_stack; ValueError in one
    line when this torch's private memory profiler is not the one the lab reads."""
    try:
        from torch.profiler._memory_profiler import _CATEGORY_TO_INDEX, MemoryProfileTimeline

        timeline = MemoryProfileTimeline(prof._memory_profile())
        times, sizes = timeline._coalesce_timeline(device)
        names = {i + 1: "unknown" if c is None else c.name.lower()  # column 0 is unused
                 for c, i in _CATEGORY_TO_INDEX.items()}
        return times, {name: [row[i] for row in sizes] for i, name in names.items()}
    except (ImportError, AttributeError, TypeError) as exc:
        raise ValueError(
            f"torch {torch.__version__} changed its private memory profiler "
            f"(torch.profiler._memory_profiler: {type(exc).__name__}: {exc}); the memory timeline "
            f"reads the one of torch {TESTED_TORCH}: install one of those, or profile without "
            "the memory timeline") from None


@dataclass(frozen=True)
class MemoryTimeline:
    """Bytes per category at each time of one profiled step (ms from its start) on `device`."""

    device: str
    times_ms: list[float]
    bytes_by_category: dict[str, list[int]]

    @property
    def total_bytes(self) -> list[int]:
        return [sum(at) for at in zip(*self.bytes_by_category.values(), strict=True)]

    @property
    def peak_index(self) -> int:
        totals = self.total_bytes
        return totals.index(max(totals))

    @property
    def peak_ms(self) -> float:
        return self.times_ms[self.peak_index]

    @property
    def peak_bytes(self) -> int:
        return self.total_bytes[self.peak_index]

    @property
    def at_peak(self) -> dict[str, int]:
        """What was live at the peak, by category, largest first (empty categories left out)."""
        live = {k: v[self.peak_index] for k, v in self.bytes_by_category.items()}
        return {k: v for k, v in sorted(live.items(), key=lambda kv: -kv[1]) if v}

    def largest(self, category: str) -> int:
        """The most bytes `category` held at any time of the step."""
        return max(self.bytes_by_category.get(category, [0]))

    def summary(self) -> str:
        """"memory peak 539 KiB at 3.21 ms of a 5.02 ms step: optimizer_state 204 KiB, ..."."""
        live = ", ".join(f"{k} {format_bytes(v)}" for k, v in self.at_peak.items())
        return (f"memory peak {format_bytes(self.peak_bytes)} at {self.peak_ms:.3g} ms of a "
                f"{self.times_ms[-1]:.3g} ms step ({self.device}, torch's memory profiler): "
                f"{live}")

    def to_dict(self) -> dict:
        return {**asdict(self), "peak_ms": self.peak_ms, "peak_bytes": self.peak_bytes,
                "at_peak": self.at_peak}


def step_memory_timeline(trainer, micro_batches, device: str) -> MemoryTimeline:
    """Profile one `trainer.cycle(micro_batches)` (warm: its optimizer state made) for memory."""
    on_cuda = device.startswith("cuda")
    where = torch.device(device)
    if on_cuda and where.index is None:  # the profiler keys memory by "cuda:N"
        where = torch.device("cuda", torch.cuda.current_device())
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    with torch_profile(activities=activities, record_shapes=True, profile_memory=True,
                       with_stack=True) as prof:
        trainer.cycle(micro_batches)
        if on_cuda:
            torch.cuda.synchronize(where)
    times_us, by_category = category_timeline(prof, str(where))
    return MemoryTimeline(str(where), [(t - times_us[0]) / 1e3 for t in times_us], by_category)
