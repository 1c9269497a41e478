"""Where a profiled step's time goes, read from torch.profiler's Chrome trace: device time by
category (they and idle add up to the window), the host's op dispatch, the device's waits for
launches; on a CPU the ops' self times.

    analyse_trace(json.load(open("trace.json")), on_cuda=True, steps=3).categories_ms
"""

import bisect
import re
from collections import defaultdict
from dataclasses import dataclass, field

from ..pipeline import covered_length

MATMUL, OTHER, COMM, IDLE = "matmul/conv", "other compute", "communication", "idle"
H2D, D2H, D2D = "copy H2D", "copy D2H", "copy on device"
CATEGORIES = (MATMUL, OTHER, H2D, D2H, D2D, COMM, IDLE)  # bottom to top of a stacked bar
HOST = "host op"  # a GPU step's host segments in the timeline (the host dispatching ops)
# what two categories are in CPU mode, where the host is the device
CPU_WORDS = {IDLE: "outside ops (Python, autograd, optimizer loop)", D2D: "memory copies"}
_PRIORITY = (MATMUL, COMM, OTHER, D2D, H2D, D2H)       # who owns an instant two streams share
STEP_PREFIX = "a800lab step"                            # record_function name of each step

# nvjet_*: recent cuBLAS's GEMMs on Hopper, e.g. nvjet_hsh_192x192_64x3_2x1_v_bz_coopB_NTN
_GPU_MATMUL = re.compile(r"gemm|nvjet|cutlass|cublas|xmma|wgmma|hmma|conv|cudnn|winograd|fprop|"
                         r"dgrad|wgrad|flash|fmha|attention|triton_tem_|bmm", re.I)
_CPU_MATMUL = re.compile(r"^aten::(mm|addmm|bmm|baddbmm|addbmm|matmul|linear|_addmm_activation|"
                         r"mv|addmv|dot|einsum|conv\w*|_convolution\w*|convolution\w*|mkldnn_\w*|"
                         r"_scaled_dot_product\w*|_flash_attention\w*|_efficient_attention\w*)$")
_CPU_COPY = re.compile(r"^aten::(copy_|_copy_from|_copy_from_and_resize|_to_copy|to|clone|"
                       r"contiguous)$")
_COMM = re.compile(r"nccl|c10d::|gloo|all_?reduce|all_?gather|reduce_?scatter|alltoall", re.I)
_LAUNCH = re.compile(r"launch", re.I)
_SYNC = re.compile(r"synchronize|^cudaMemcpy$|^cuMemcpy", re.I)
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset")  # lower-cased


def category_label(category: str, on_cuda: bool) -> str:
    """A category's name for a reader: CPU mode renames idle and on-device copies."""
    return category if on_cuda else CPU_WORDS.get(category, category)


def classify_device(event: dict) -> str:
    """The category of a CUDA timeline event (kernel, memcpy, memset)."""
    cat, name = event.get("cat", "").lower(), event.get("name", "")
    if "memcpy" in cat:
        if re.search(r"HtoD|H2D", name):
            return H2D
        if re.search(r"DtoH|D2H", name):
            return D2H
        return D2D
    if "memset" in cat:
        return D2D
    if _COMM.search(name):
        return COMM
    return MATMUL if _GPU_MATMUL.search(name) else OTHER


def is_op(name: str) -> bool:
    """An operator (aten::mm, c10d::allreduce_), not an autograd wrapper (AddmmBackward0,
    autograd::engine::...): their time is the engine's, outside ops."""
    return "::" in name and not name.startswith(("autograd::", "torch::autograd::"))


def classify_op(name: str) -> str:
    """The category of a host (aten) op's self time in CPU mode."""
    if _COMM.search(name):
        return COMM
    if _CPU_MATMUL.match(name):
        return MATMUL
    return D2D if _CPU_COPY.match(name) else OTHER


@dataclass(frozen=True)
class Segment:
    """A span of one lane (a host thread or a CUDA stream), microseconds on the trace clock."""

    lane: str
    start_us: float
    end_us: float
    category: str
    name: str
    op_id: int = -1  # the op (or kernel) a segment is part of: one op's self time may be split


@dataclass
class TraceBreakdown:
    """Per-step figures of a profiled window, in ms per step."""

    on_cuda: bool
    steps: int
    window_ms: float
    categories_ms: dict[str, float]
    overlap_ms: float
    host_ops_ms: float                   # the host inside aten ops (op dispatch and the ops)
    launch_api_ms: float | None          # in cudaLaunchKernel & co (GPU)
    launches: float | None               # kernels launched per step (GPU)
    sync_wait_ms: float | None           # the host blocked in a synchronize (GPU)
    launch_wait_ms: float | None         # device idle waiting for a launch (GPU)
    top_ops: list[dict] = field(default_factory=list)
    timeline: list[Segment] = field(default_factory=list)  # one step, times from its start

    @property
    def busy_pct(self) -> float:
        busy_ms = self.window_ms - self.categories_ms[IDLE]
        return 100 * busy_ms / self.window_ms if self.window_ms > 0 else 0.0


def _spans(events: list[dict], cats: tuple[str, ...]) -> list[dict]:
    return [e for e in events if e.get("ph") == "X" and e.get("cat", "").lower() in cats
            and "dur" in e and "ts" in e]


def self_segments(ops: list[dict]) -> list[Segment]:
    """Per thread, the segments where each op is innermost (its self time)."""
    by_lane: dict[str, list[dict]] = defaultdict(list)
    for e in ops:
        by_lane[f"thread {e.get('tid')}"].append(e)
    return [seg for lane, spans in by_lane.items() for seg in _lane_segments(lane, spans)]


def _lane_segments(lane: str, spans: list[dict]) -> list[Segment]:
    out: list[Segment] = []
    stack: list[tuple[float, str, int]] = []  # (end, name, op id) of the open ops
    cursor = 0.0
    for e in sorted(spans, key=lambda e: (e["ts"], -e["dur"])):
        start, end = float(e["ts"]), float(e["ts"]) + float(e["dur"])
        while stack and stack[-1][0] <= start:  # ops that ended before this one starts
            cursor = _emit(out, lane, stack, cursor, stack[-1][0])
            stack.pop()
        cursor = _emit(out, lane, stack, cursor, start)
        stack.append((end, e["name"], id(e)))
    while stack:
        cursor = _emit(out, lane, stack, cursor, stack[-1][0])
        stack.pop()
    return out


def _emit(out: list[Segment], lane: str, stack: list, cursor: float, until: float) -> float:
    """The top op's segment from `cursor` to `until`, if any; returns the new cursor."""
    if stack and until > cursor:
        _, name, op_id = stack[-1]
        out.append(Segment(lane, cursor, until, classify_op(name), name, op_id))
    return max(cursor, until)


def device_segments(events: list[dict]) -> list[Segment]:
    """Every CUDA kernel, copy and memset as a segment of its stream's lane."""
    return [Segment(f"stream {e.get('args', {}).get('stream', e.get('tid'))}", float(e["ts"]),
                    float(e["ts"]) + float(e["dur"]), classify_device(e), e.get("name", ""),
                    id(e)) for e in _spans(events, DEVICE_CATS)]


def split(segments: list[Segment], start_us: float, end_us: float
          ) -> tuple[dict[str, float], float]:
    """(us per category, us doubly covered) in [start, end]: each instant to the category
    first in _PRIORITY running then; the rest is idle."""
    edges = []
    for s in segments:
        a, b = max(s.start_us, start_us), min(s.end_us, end_us)
        if b > a:
            edges += [(a, 1, s.category), (b, -1, s.category)]
    edges.sort(key=lambda x: (x[0], x[1]))
    totals = dict.fromkeys(CATEGORIES, 0.0)
    active: dict[str, int] = defaultdict(int)
    overlap, last = 0.0, start_us
    for t, delta, cat in edges:
        running = [c for c in _PRIORITY if active[c] > 0]
        if running and t > last:
            totals[running[0]] += t - last
            if sum(active.values()) > 1:
                overlap += t - last
        last = max(last, t)
        active[cat] += delta
    totals[IDLE] = max(0.0, (end_us - start_us) - sum(totals.values()))
    return totals, overlap


def _launch_waits(device: list[Segment], launches: dict, raw_device: list[dict],
                  start: float, end: float) -> float:
    """Microseconds the device sat idle until a kernel launched after it went idle (`launches`:
    correlation id -> (host time, host lane))."""
    by_start = sorted(zip(device, raw_device, strict=True), key=lambda p: p[0].start_us)
    reach, waited = start, 0.0
    for seg, raw in by_start:
        if seg.start_us > reach and seg.start_us <= end:
            launch = launches.get(raw.get("args", {}).get("correlation"))
            if launch is not None and launch[0] > reach:
                waited += seg.start_us - reach
        reach = max(reach, seg.end_us)
    return waited


def _top_ops(segments: list[Segment], steps: int, owner=None, limit: int = 10) -> list[dict]:
    """The ops with the most self time (ms per step); `owner(segment)`: a device segment's op."""
    time_us: dict[str, float] = defaultdict(float)
    calls: dict[str, set] = defaultdict(set)
    cats: dict[str, str] = {}
    for s in segments:
        name = owner(s) if owner else s.name
        time_us[name] += s.end_us - s.start_us
        calls[name].add(s.op_id)
        cats.setdefault(name, s.category)
    total = sum(time_us.values()) or 1.0
    ranked = sorted(time_us, key=time_us.get, reverse=True)[:limit]
    return [{"name": n, "self_ms": time_us[n] / 1e3 / steps, "calls": len(calls[n]) / steps,
             "share_pct": 100 * time_us[n] / total, "category": cats[n]} for n in ranked]


def analyse_trace(trace: dict, *, on_cuda: bool, steps: int | None = None) -> TraceBreakdown:
    """The per-step breakdown of the steps annotated `STEP_PREFIX N` (ValueError if none)."""
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else []
    marks = sorted((e for e in _spans(events, ("user_annotation",))
                    if str(e.get("name", "")).startswith(STEP_PREFIX)), key=lambda e: e["ts"])
    if not marks:
        raise ValueError(f"the trace has no '{STEP_PREFIX} N' ranges: profile the steps inside "
                         f"torch.profiler.record_function('{STEP_PREFIX} N')")
    steps = steps or len(marks)
    start = float(marks[0]["ts"])
    host_end = max(float(m["ts"]) + float(m["dur"]) for m in marks)
    ops = [e for e in _spans(events, ("cpu_op",)) if start <= e["ts"] <= host_end and
           is_op(e.get("name", ""))]
    host = self_segments(ops)
    runtime = _spans(events, ("cuda_runtime", "cuda_driver", "runtime"))
    per = 1e3 * steps  # microseconds in all steps -> milliseconds per step
    device, end, owner = host, host_end, None
    gpu = dict.fromkeys(("launch_api_ms", "launches", "sync_wait_ms", "launch_wait_ms"))
    if on_cuda:
        raw_device = [e for e in _spans(events, DEVICE_CATS) if e["ts"] >= start]
        device = device_segments(raw_device)
        end = max([host_end, *(s.end_us for s in device)])
        # every host call that queued device work (kernel launches, async copies, memsets)
        launches = {e.get("args", {}).get("correlation"): (float(e["ts"]), f"thread {e.get('tid')}")
                    for e in runtime}
        in_window = [e for e in runtime if start <= e["ts"] <= end]
        launched = [float(e["dur"]) for e in in_window if _LAUNCH.search(e["name"])]
        gpu = {"launch_api_ms": sum(launched) / per, "launches": len(launched) / steps,
               "sync_wait_ms": sum(float(e["dur"]) for e in in_window
                                   if _SYNC.search(e["name"])) / per,
               "launch_wait_ms": _launch_waits(device, launches, raw_device, start, end) / per}
        owner = _launching_ops(raw_device, device, launches, host)
    totals, overlap = split(device, start, end)
    host_ops = covered_length([(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in ops])
    return TraceBreakdown(
        on_cuda=on_cuda, steps=steps, window_ms=(end - start) / per,
        categories_ms={k: v / per for k, v in totals.items()}, overlap_ms=overlap / per,
        host_ops_ms=host_ops / per, **gpu, top_ops=_top_ops(device, steps, owner),
        timeline=_one_step(marks, host, device if on_cuda else [], end))


def _launching_ops(raw_device, device, launch_at: dict, host: list[Segment]):
    """owner(segment): the innermost host op that launched it, else the kernel's name."""
    lanes: dict[str, list[Segment]] = defaultdict(list)
    for seg in host:
        lanes[seg.lane].append(seg)
    starts = {}
    for lane, segs in lanes.items():
        segs.sort(key=lambda s: s.start_us)
        starts[lane] = [s.start_us for s in segs]
    names = {}
    for seg, raw in zip(device, raw_device, strict=True):
        name, hit = seg.name, launch_at.get(raw.get("args", {}).get("correlation"))
        if hit is not None and hit[1] in lanes:
            i = bisect.bisect_right(starts[hit[1]], hit[0]) - 1
            if i >= 0 and lanes[hit[1]][i].end_us >= hit[0]:
                name = lanes[hit[1]][i].name
        names[id(seg)] = name
    return lambda seg: names.get(id(seg), seg.name)


def _one_step(marks: list[dict], host: list[Segment], device: list[Segment], end: float
              ) -> list[Segment]:
    """The middle step's host and device segments, times from the step's start (us)."""
    i = len(marks) // 2
    start = float(marks[i]["ts"])
    stop = float(marks[i + 1]["ts"]) if i + 1 < len(marks) else end
    host_stop = float(marks[i]["ts"]) + float(marks[i]["dur"])
    on_cuda = bool(device)
    out = [Segment(("host " if on_cuda else "CPU ") + s.lane, s.start_us - start,
                   s.end_us - start, HOST if on_cuda else s.category, s.name, s.op_id)
           for s in host if start <= s.start_us < host_stop]
    return out + [Segment("device " + s.lane, s.start_us - start, s.end_us - start, s.category,
                          s.name, s.op_id) for s in device if start <= s.start_us < stop]
