"""Profile a training step: where its time goes, whether it is launch-bound, its top ops and a
Perfetto / Chrome trace; the step is timed unprofiled first (the honest step time). With
`memory=True` one more step is profiled for memory (memory_timeline.py: bytes by category).

    report = profile_step(TrainSpec(model="transformer", batch_size=32), out="prof/")
    print(report.summary())                  # what `python -m a800lab profile` prints
"""

import contextlib
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, record_function
from torch.profiler import profile as torch_profile

from ...core.backends import resolve_device
from ...core.cancel import CancelToken
from ...core.checks import positive_int
from ...core.environment import environment
from ...core.noise import CpuLoadMeter, assess, cpu_conditions
from ...core.timing import measure
from ..models.presets import Task, preset
from ..models.task import CUSTOM
from .memory_timeline import MemoryTimeline, step_memory_timeline
from .spec import TrainSpec, check_precision, precision_context
from .trace import IDLE, STEP_PREFIX, TraceBreakdown, analyse_trace, category_label
from .trainer import Trainer, check_levers

LAUNCH_BOUND_SHARE = 0.2   # the device waiting for launches this share of a step: launch-bound
HIGH_OVERHEAD = 0.25       # profiled steps this much slower than unprofiled: say so
DEVICE_BOUND_PCT = 80.0    # the device (CPU mode: the ops) busy this much: compute-bound
TRACE_FILE, REPORT_FILE, MEMORY_FILE = "trace.json", "profile.json", "memory_timeline.json"


@dataclass
class ProfileReport:
    """One profiled configuration: the breakdown per step, headlines, the trace, conditions."""

    spec: dict
    device: str
    device_name: str
    mode: str
    torch_threads: int
    steps: int
    warmup_steps: int
    step_ms: float                 # the unprofiled step (median of measure()'s samples)
    step_iqr_ms: float
    effective_batch: int
    breakdown: TraceBreakdown
    trace_path: str
    noise: dict = field(default_factory=dict)
    profiler_log: list = field(default_factory=list)  # what kineto wrote to stderr
    memory: MemoryTimeline | None = None  # one more step's memory by category (memory=True)

    @property
    def on_cuda(self) -> bool:
        return self.breakdown.on_cuda

    @property
    def busy_pct(self) -> float:
        """GPU: the device's busy share of the step; CPU mode: the share inside ops."""
        return self.breakdown.busy_pct

    @property
    def samples_per_s(self) -> float:
        return self.effective_batch / (self.step_ms / 1e3)

    @property
    def profiler_overhead(self) -> float:
        """Profiled step / unprofiled step - 1 (the profiler's own cost on the host)."""
        return self.breakdown.window_ms / self.step_ms - 1 if self.step_ms > 0 else 0.0

    @property
    def launch_bound(self) -> bool | None:
        """The device waited for launches LAUNCH_BOUND_SHARE of a step or more (CPU: None)."""
        waited = self.breakdown.launch_wait_ms
        if waited is None:
            return None
        return waited >= LAUNCH_BOUND_SHARE * self.breakdown.window_ms

    @property
    def bound(self) -> str:
        """GPU: "launch-bound", "device-bound" or "mixed"; CPU: "overhead-bound" (outside ops
        half the step or more), "compute-bound" or "mixed"."""
        if self.on_cuda:
            if self.launch_bound:
                return "launch-bound"
            return "device-bound" if self.busy_pct >= DEVICE_BOUND_PCT else "mixed"
        idle_share = self.breakdown.categories_ms[IDLE] / self.breakdown.window_ms
        if idle_share >= 0.5:
            return "overhead-bound"
        return "compute-bound" if self.busy_pct >= DEVICE_BOUND_PCT else "mixed"

    @property
    def verdict(self) -> str:
        """One sentence: what bounds the step and what to try."""
        b, window = self.breakdown, self.breakdown.window_ms
        if self.on_cuda:
            waited = b.launch_wait_ms or 0.0
            if self.launch_bound:
                return (f"launch-bound: the device sat idle {waited:.3g} ms of a {window:.3g} ms "
                        f"step ({100 * waited / window:.0f}%) waiting for the host to launch "
                        f"{b.launches:.0f} kernels; fewer, larger kernels help: a larger batch, "
                        "torch.compile, CUDA graphs (compile='reduce-overhead'), a fused "
                        "optimizer")
            if self.bound == "device-bound":
                return (f"device-bound: the device is busy {self.busy_pct:.0f}% of the step; "
                        "speed comes from the kernels themselves (precision, shapes, compile)")
            return (f"mixed: the device is busy {self.busy_pct:.0f}% of the step; of the idle "
                    f"time {waited:.3g} ms waited for launches, the rest for synchronisations, "
                    "copies or data")
        idle = b.categories_ms[IDLE]
        text = (f"CPU mode (no device): ops run {self.busy_pct:.0f}% of the step, "
                f"{idle:.3g} ms of {window:.3g} ms is outside ops (Python, autograd, the "
                "optimizer's loop)")
        if self.bound == "overhead-bound":
            return text + (": overhead-bound, the CPU analogue of launch-bound (a larger "
                           "batch or fewer, fused ops help)")
        return text

    @property
    def overhead_note(self) -> str:
        """A warning when the profiled steps ran far slower than the unprofiled ones."""
        if self.profiler_overhead <= HIGH_OVERHEAD:
            return ""
        return (f"the profiled steps ran {100 * self.profiler_overhead:.0f}% slower than "
                "unprofiled ones: the profiler's cost per op (or other work on the machine) "
                "inflates the host-side shares of a small, op-heavy step")

    def summary(self) -> str:
        """A few lines for a terminal: headline, the split, top ops, the trace file."""
        b = self.breakdown
        noisy = " (noisy: " + "; ".join(self.noise.get("reasons", [])) + ")" \
            if self.noise.get("noisy") else ""
        spec = self.spec
        # a user's model is "your model", not "custom (custom)"
        name = "your model" if spec["model"] == CUSTOM else f"{spec['model']} ({spec['size']})"
        lines = [f"{name}, micro-batch {spec['batch_size']} x {spec['accum_steps']}, "
                 f"{spec['precision']}, compile {spec['compile']} on {self.device_name} "
                 f"({self.mode}, {self.torch_threads} torch thread"
                 f"{'s' * (self.torch_threads != 1)})",
                 f"step {self.step_ms:.4g} ms unprofiled (IQR {self.step_iqr_ms:.2g} ms)"
                 f"{noisy}, {self.samples_per_s:.4g} samples/s; profiled {b.window_ms:.4g} ms "
                 f"per step over {self.steps} steps (profiler overhead "
                 f"{100 * self.profiler_overhead:+.0f}%)",
                 self.verdict + (f" (note: {self.overhead_note})" if self.overhead_note else ""),
                 ("device time per step: " if self.on_cuda else "CPU time per step: ") +
                 ", ".join(f"{category_label(k, self.on_cuda)} {v:.3g} ms"
                           for k, v in b.categories_ms.items() if v > 0)]
        if self.on_cuda:
            lines.append(f"host: inside ops {b.host_ops_ms:.3g} ms, launch calls "
                         f"{b.launch_api_ms:.3g} ms ({b.launches:.0f} launches), synchronise "
                         f"{b.sync_wait_ms:.3g} ms; streams overlapped {b.overlap_ms:.3g} ms")
        lines.append("top ops by " + ("device" if self.on_cuda else "CPU") + " self time:")
        lines += [f"  {op['self_ms']:8.3f} ms {op['share_pct']:5.1f}%  {op['name']} "
                  f"({op['calls']:g} calls, {op['category']})" for op in b.top_ops]
        lines.append(f"trace: {self.trace_path} (open in https://ui.perfetto.dev or "
                     "chrome://tracing)")
        if self.memory is not None:
            lines.append(self.memory.summary())
        return "\n".join(lines)

    def to_dict(self) -> dict:
        own = {f.name: getattr(self, f.name) for f in fields(self)
               if f.name not in ("breakdown", "memory")}
        told = ("samples_per_s", "busy_pct", "bound", "launch_bound", "verdict",
                "profiler_overhead", "overhead_note")
        seen = ("window_ms", "categories_ms", "overlap_ms", "host_ops_ms", "launch_api_ms",
                "launches", "sync_wait_ms", "launch_wait_ms", "top_ops")
        memory = {} if self.memory is None else {"memory_peak_bytes": self.memory.peak_bytes,
                                                  "memory_at_peak": self.memory.at_peak}
        return {**own, **{k: getattr(self, k) for k in told},
                **{k: getattr(self.breakdown, k) for k in seen}, **memory}


@contextlib.contextmanager
def native_stderr_into(lines: list[str]):
    """File descriptor 2 (kineto's C++ chatter) into `lines` inside the block, restored after."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            lines += caught.read().decode(errors="replace").splitlines()


def profile_step(spec: TrainSpec, task: Task | None = None, *, device: str = "auto",
                 steps: int = 3, warmup_steps: int = 3, timing_budget_s: float = 0.3,
                 out: str | Path | None = None, memory: bool = False,
                 cancel: CancelToken | None = None) -> ProfileReport:
    """Profile `steps` steps of `spec`; `out`: the folder for trace.json and profile.json (and
    with `memory`, memory_timeline.json: one more step profiled for memory)."""
    positive_int("steps", steps, "3")
    positive_int("warmup_steps", warmup_steps, "3")
    device = resolve_device(device)
    check_precision(spec.precision, device)
    task = task or preset(spec.model, spec.size)
    check_levers(spec, task, device)
    folder = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="a800lab-profile-"))
    folder.mkdir(parents=True, exist_ok=True)
    on_cuda = device.startswith("cuda")
    with precision_context(spec.precision):
        trainer = Trainer(spec, task, device)
        trainer.train(warmup_steps, cancel=cancel)  # optimizer state, compilation
        pool = trainer.pool()
        meter = CpuLoadMeter().start()
        timing = measure(lambda: trainer.cycle(pool), device=device, budget_s=timing_budget_s,
                         warmup_s=0.0, cancel=cancel)
        conditions = cpu_conditions(meter.stop())
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
        prof, log = torch_profile(activities=activities), []
        with native_stderr_into(log):  # kineto's start chatter, kept in the report
            prof.start()
        try:
            for i in range(steps):
                if cancel is not None:
                    cancel.raise_if_cancelled()
                with record_function(f"{STEP_PREFIX} {i}"):
                    trainer.cycle(pool)
            if on_cuda:
                torch.cuda.synchronize(device)
        finally:
            with native_stderr_into(log):
                prof.stop()
        with native_stderr_into(log):
            timeline = step_memory_timeline(trainer, pool, device) if memory else None
    if timeline is not None:
        (folder / MEMORY_FILE).write_text(json.dumps(timeline.to_dict()), encoding="utf-8")
    trace_path = folder / TRACE_FILE
    prof.export_chrome_trace(str(trace_path))
    breakdown = analyse_trace(json.loads(trace_path.read_text()), on_cuda=on_cuda, steps=steps)
    env = environment(device)
    report = ProfileReport(
        spec=spec.to_dict(), device=device, device_name=env["device_name"], mode=env["mode"],
        torch_threads=torch.get_num_threads(), steps=steps, warmup_steps=warmup_steps,
        step_ms=timing.median_ms, step_iqr_ms=timing.iqr_ms, effective_batch=spec.effective_batch,
        breakdown=breakdown, trace_path=str(trace_path),
        noise=assess(timing.samples_ms, conditions, on_cpu=not on_cuda), profiler_log=log,
        memory=timeline)
    (folder / REPORT_FILE).write_text(json.dumps(report.to_dict(), indent=1), encoding="utf-8")
    return report
