"""An input pipeline feeding a training step (loader -> copy -> step): where each step's time
goes, on one timeline, and how idle the device is while it waits for data.

    pipeline_point(num_workers=2, pin_memory=True, non_blocking=True, device="cuda")
    run_pipeline(next_batch, copy, compute, device="cpu", clock=fake_clock).idle_fraction
"""

import contextlib
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..core.knobs import check_knobs, knob
from ..core.timing import Timing, measure

COSTS = ("cpu", "wait")
MAIN_LANES = ("data wait", "copy", "compute", "copy (GPU)", "compute (GPU)")
TIMELINE_STEPS = 6  # steps of the timeline kept in a record (the first timed ones)
# (channels, side) of a generated image and the MLP's hidden width, per mode
SHAPES = {"cpu": (3, 32, 256), "cuda": (3, 64, 4096)}
CLASSES = 10


def covered_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by possibly overlapping (start, end) intervals."""
    total, reach = 0.0, -math.inf
    for start, end in sorted(intervals):
        total += max(0.0, end - max(start, reach))  # the part past what is already covered
        reach = max(reach, end)
    return total


def idle_fraction(spans: list[tuple[str, int, float, float]], lane: str,
                  window: tuple[float, float]) -> float:
    """1 - (time `lane` was busy inside `window`) / (window length)."""
    start, end = window
    if end <= start:
        raise ValueError(f"empty window {window}")
    inside = [(max(s, start), min(e, end)) for name, _, s, e in spans
              if name == lane and e > start and s < end]
    return 1.0 - covered_length(inside) / (end - start)


@dataclass
class PipelineRun:
    """The timed steps' timing and spans (lane, step, start_s, end_s)."""

    timing: Timing
    spans: list[tuple[str, int, float, float]] = field(default_factory=list)
    compute_lane: str = "compute"

    @property
    def window(self) -> tuple[float, float]:
        """From the first timed step's start to the last one's end (the training loop's lanes)."""
        main = [(s, e) for lane, _, s, e in self.spans if lane in MAIN_LANES]
        return min(s for s, _ in main), max(e for _, e in main)

    @property
    def idle_fraction(self) -> float:
        return idle_fraction(self.spans, self.compute_lane, self.window)

    @property
    def idle_per_step(self) -> list[float]:
        """Each timed step's idle fraction, from its start to the next step's (the last: to its
        end), so the windows tile the whole one: the idle fraction's samples."""
        steps: dict[int, list[float]] = {}
        for lane, step, s, e in self.spans:
            if lane in MAIN_LANES:
                steps.setdefault(step, []).extend((s, e))
        starts = [min(t) for _, t in sorted(steps.items())]
        ends = starts[1:] + [max(max(t) for t in steps.values())] if steps else []
        return [idle_fraction(self.spans, self.compute_lane, (s, e))
                for s, e in zip(starts, ends, strict=True) if e > s]

    def lane_ms(self, lane: str) -> float:
        """Median per-step milliseconds of one lane (0 when it never ran)."""
        per_step: dict[int, float] = {}
        for name, step, s, e in self.spans:
            if name == lane:
                per_step[step] = per_step.get(step, 0.0) + (e - s) * 1e3
        values = sorted(per_step.values())
        return values[len(values) // 2] if values else 0.0


def run_pipeline(next_batch: Callable[[], object], copy: Callable[[object], object],
                 compute: Callable[[object], object], *, device: str = "cpu",
                 clock: Callable[[], float] = time.perf_counter, budget_s: float = 0.3,
                 min_warmup: int = 3, extra_spans: Callable[[int, object], list] | None = None
                 ) -> PipelineRun:
    """Time steps of next_batch -> copy -> compute with measure(), recording each stage's span
    (`extra_spans(step, batch)`: spans the batch carries, the workers')."""
    on_cuda = device.startswith("cuda")
    spans: list[tuple[str, int, float, float]] = []
    events: list[tuple[int, object, object, object]] = []
    step_no = [0]

    @contextlib.contextmanager
    def span(lane: str):
        start = clock()
        yield
        spans.append((lane, step_no[0], start, clock()))

    def step() -> None:
        with span("data wait"):
            batch = next_batch()
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(3)] if on_cuda else None
        if marks:
            marks[0].record()
        with span("copy"):
            moved = copy(batch)
        if marks:
            marks[1].record()
        with span("compute"):
            compute(moved)
        if marks:
            marks[2].record()
            events.append((step_no[0], *marks))
        if extra_spans is not None:
            spans.extend(extra_spans(step_no[0], batch))
        step_no[0] += 1

    # events are recorded on the current device's stream: make `device` current for all of them
    with torch.cuda.device(device) if on_cuda else contextlib.nullcontext():
        reference = None
        if on_cuda:
            torch.cuda.synchronize(device)
            reference = (torch.cuda.Event(enable_timing=True), clock())
            reference[0].record()
        timing = measure(step, device=device, budget_s=budget_s, min_warmup=min_warmup,
                         flush_l2=False, clock=clock)
        timed = [s for s in spans if s[1] >= timing.warmup]
        lane = "compute"
        if on_cuda:
            torch.cuda.synchronize(device)
            ref_event, ref_s = reference
            lane = "compute (GPU)"
            for step_index, start, copied, done in events:
                if step_index >= timing.warmup:
                    at = [ref_s + ref_event.elapsed_time(e) / 1e3 for e in (start, copied, done)]
                    timed += [("copy (GPU)", step_index, at[0], at[1]),
                              (lane, step_index, at[1], at[2])]
    return PipelineRun(timing=timing, spans=timed, compute_lane=lane)


class GeneratedImages(torch.utils.data.Dataset):
    """Images made on demand, each costing `preprocess_ms` of CPU work (or waiting), carrying
    (image, label, start_s, end_s, worker id)."""

    def __init__(self, side: int, channels: int, preprocess_ms: float, cost: str,
                 length: int = 10**9):
        self.side, self.channels, self.length = side, channels, length
        self.preprocess_s, self.cost = preprocess_ms / 1e3, cost

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        start = time.perf_counter()
        image = torch.randint(0, 256, (self.channels, self.side, self.side),
                              generator=torch.Generator().manual_seed(index), dtype=torch.uint8)
        image = image.float().div_(255)  # "decode and normalise"
        if self.cost == "wait":
            time.sleep(max(0.0, start + self.preprocess_s - time.perf_counter()))
        else:
            while time.perf_counter() < start + self.preprocess_s:  # CPU-bound work
                pass
        info = torch.utils.data.get_worker_info()
        label = int(image[0, 0, 0] * CLASSES) % CLASSES
        return image, label, start, time.perf_counter(), -1 if info is None else info.id


def worker_spans(step: int, batch) -> list[tuple[str, int, float, float]]:
    """Per worker, the span from its first sample's start to its last sample's end."""
    _, _, starts, ends, workers = batch
    out = []
    for worker in sorted(set(workers.tolist())):
        mine = workers == worker
        lane = "preprocess (main process)" if worker < 0 else f"worker {worker}"
        out.append((lane, step, float(starts[mine].min()), float(ends[mine].max())))
    return out


def timeline_of(spans: list[tuple[str, int, float, float]], steps: int = TIMELINE_STEPS
                ) -> list[list]:
    """[lane, start_ms, end_ms] of the first `steps` timed steps, and the worker spans inside
    that time (clipped)."""
    first = sorted({step for lane, step, _, _ in spans if lane in MAIN_LANES})[:steps]
    main = [s for s in spans if s[0] in MAIN_LANES and s[1] in first]
    if not main:
        return []
    start, end = min(s[2] for s in main), max(s[3] for s in main)
    inside = [(lane, max(s, start), min(e, end)) for lane, _, s, e in spans
              if lane not in MAIN_LANES and e > start and s < end]
    return [[lane, round((s - start) * 1e3, 4), round((e - start) * 1e3, 4)]
            for lane, s, e in [(lane, s, e) for lane, _, s, e in main] + inside]


@dataclass(frozen=True)
class PipelineSpec:
    """One pipeline point's parameters, each checked by its declaration (core.knobs)."""

    num_workers: int = knob(0, "DataLoader worker processes", integer=True, lo=0, example="2")
    pin_memory: bool = knob(False, "page-locked host batches (GPU)", choices=(False, True))
    non_blocking: bool = knob(False, "asynchronous copies (GPU)", choices=(False, True))
    prefetch_factor: int = knob(2, "batches each worker keeps ready", integer=True, lo=1,
                                scale="pow2", panel_hi=4)
    preprocess_ms: float = knob(0.1, "preprocessing per sample", unit="ms", lo=0, hi=1000)
    cost: str = knob("cpu", "cpu (decoding) or wait (I/O)", choices=COSTS)
    batch_size: int = knob(64, "samples per batch", integer=True, lo=1, scale="pow2",
                           panel_hi=1024)

    def __post_init__(self):
        check_knobs(self)


def pipeline_point(*, device: str = "cpu", budget_s: float = 0.5, **params) -> dict:
    """One pipeline configuration (PipelineSpec's fields), measured (a sweep point; throughput
    in samples/s)."""
    spec = PipelineSpec(**params)
    if not device.startswith("cuda") and (spec.pin_memory or spec.non_blocking):
        raise ValueError("pinned memory and non_blocking copies need a CUDA device: on a CPU "
                         "there is no host-to-device copy (run with pin_memory=False, "
                         "non_blocking=False)")
    num_workers, prefetch_factor, batch_size = spec.num_workers, spec.prefetch_factor, \
        spec.batch_size
    channels, side, hidden = SHAPES["cuda" if device.startswith("cuda") else "cpu"]
    torch.manual_seed(0)
    features = channels * side * side
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(features, hidden),
                                torch.nn.ReLU(), torch.nn.Linear(hidden, CLASSES)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with warnings.catch_warnings():  # that workers outnumber the cores: the noise verdict says it
        warnings.filterwarnings("ignore", message="This DataLoader will create",
                                category=UserWarning)
        iterator = iter(torch.utils.data.DataLoader(
            GeneratedImages(side, channels, spec.preprocess_ms, spec.cost),
            batch_size=batch_size, num_workers=num_workers, pin_memory=spec.pin_memory,
            prefetch_factor=prefetch_factor if num_workers else None))

    def copy(batch):
        images, labels = batch[0], batch[1]
        return (images.to(device, non_blocking=spec.non_blocking),
                labels.to(device, non_blocking=spec.non_blocking))

    def compute(moved) -> None:
        images, labels = moved
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    try:
        run = run_pipeline(lambda: next(iterator), copy, compute, device=device,
                           budget_s=budget_s, min_warmup=2 + num_workers * prefetch_factor,
                           extra_spans=worker_spans)
        # the workers spent the timed window making the batches queued after it: fetch them
        # (untimed) for the timeline
        after = [worker_spans(-1, next(iterator)) for _ in range(num_workers * prefetch_factor)]
    finally:
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if shutdown is not None:  # end the worker processes now, not at garbage collection
            shutdown()
    compute_lane = run.compute_lane
    timeline = timeline_of(run.spans + [s for spans in after for s in spans])
    return {"throughput": batch_size / (run.timing.median_ms / 1e3),
            "throughput_unit": "samples/s", "timing": run.timing,
            "idle_fraction": run.idle_fraction, "idle_per_step": run.idle_per_step,
            "data_wait_ms": run.lane_ms("data wait"),
            "copy_ms": run.lane_ms("copy (GPU)" if compute_lane != "compute" else "copy"),
            "compute_ms": run.lane_ms(compute_lane), "batch_bytes": batch_size * features * 4,
            "device_stage": "GPU" if device.startswith("cuda") else "CPU (no GPU: the device "
                            "stage runs on the CPU)", "timeline": timeline}
