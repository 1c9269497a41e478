"""Is a measurement clean? Timing spread, CPU oversubscription (torch's threads plus the cores
others kept busy over the window, read from /proc, exceed the usable cores; or a saturated
machine whose others took a share) and descheduled samples.

    load = CpuLoadMeter().start() ... .stop(); assess(samples_ms, cpu_conditions(load))
"""

import os
import statistics
import time

import torch

NOISE_IQR_OVER_MEDIAN = 0.10   # above this spread the median is not a stable figure
OVERSUBSCRIBED_MARGIN_CORES = 0.5  # threads + busy others may exceed the cores by this much
SATURATED_IDLE_CORES = 0.15    # less idle than this over the window: every core was busy
SHARED_CORES = 0.25            # on a saturated machine, others holding this much took cores
_MIN_LOAD_WINDOW_S = 0.05      # /proc/stat counts in 10 ms ticks: shorter windows say nothing
_DESCHEDULED_EXCESS_MS = 1.0   # a sample this much above the fastest ...
_DESCHEDULED_RATIO = 1.5       # ... and 1.5x it lost its core for a time slice
_DESCHEDULED_SHARE = 0.2       # flagged when at least this share of the samples did


def usable_cores() -> int:
    """CPUs this process may run on (its affinity), else the machine's logical cores."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_cpu_threads() -> int:
    """Threads for CPU-mode panels: all usable cores but one (at least 1), leaving a core to
    the JupyterLab server, the browser and the panel's own drawing."""
    return max(1, usable_cores() - 1)


def _ticks() -> tuple[int, int] | None:
    """(busy ticks of all CPUs, ticks of this process) now, or None without /proc."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        with open("/proc/self/stat") as f:
            own = f.read().rsplit(")", 1)[1].split()
    except (OSError, ValueError, IndexError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    busy = sum(fields[:8]) - idle  # user nice system idle iowait irq softirq steal
    return busy, int(own[11]) + int(own[12])  # utime + stime (fields 14, 15 of stat)


class CpuLoadMeter:
    """How many cores this process and all other processes kept busy between start and stop."""

    def __init__(self) -> None:
        self._start: tuple[float, tuple[int, int] | None] | None = None

    def start(self) -> "CpuLoadMeter":
        self._start = (time.monotonic(), _ticks())
        return self

    def stop(self) -> dict:
        """{"window_s", "others_busy_cores", "self_busy_cores"}; the cores are None when the
        window was too short or /proc is missing."""
        if self._start is None:
            raise RuntimeError("CpuLoadMeter.stop() before start()")
        (t0, before), now = self._start, (time.monotonic(), _ticks())
        window_s = now[0] - t0
        load = {"window_s": window_s, "others_busy_cores": None, "self_busy_cores": None}
        if before is None or now[1] is None or window_s < _MIN_LOAD_WINDOW_S:
            return load
        hz = os.sysconf("SC_CLK_TCK")
        busy_cores = (now[1][0] - before[0]) / hz / window_s
        self_cores = (now[1][1] - before[1]) / hz / window_s
        load["self_busy_cores"] = round(self_cores, 2)
        load["others_busy_cores"] = round(max(0.0, busy_cores - self_cores), 2)
        return load


def cpu_conditions(load: dict | None = None) -> dict:
    """What a CPU point ran under: torch's thread count, the usable cores and the load."""
    return {"torch_threads": torch.get_num_threads(), "usable_cores": usable_cores(),
            **(load or {})}


def _saturated(conditions: dict) -> bool:
    """This process and the others together kept every usable core busy over the window."""
    own, others = conditions.get("self_busy_cores"), conditions.get("others_busy_cores")
    cores = conditions.get("usable_cores")
    return None not in (own, others, cores) and own + others >= cores - SATURATED_IDLE_CORES


def quartiles(samples) -> tuple[float, float, float]:
    """(q25, median, q75) of the samples (inclusive quartiles; one sample is all three)."""
    if len(samples) == 1:
        return (float(samples[0]),) * 3
    q25, median, q75 = statistics.quantiles(samples, n=4, method="inclusive")
    return q25, median, q75


def spread_is_noisy(iqr_ms: float, median_ms: float) -> bool:
    """The lab's one spread rule: IQR/median above NOISE_IQR_OVER_MEDIAN (10%) makes the median
    no stable figure (Timing.noisy and assess() both ask it)."""
    return median_ms > 0 and iqr_ms / median_ms > NOISE_IQR_OVER_MEDIAN


def assess(samples_ms, conditions: dict | None = None, *, on_cpu: bool = False,
           spread: bool = True, reasons=()) -> dict:
    """The noise verdict of one point: {"noisy", "contended", "iqr_ms", "iqr_over_median",
    "reasons"} ({} without samples); "contended" when a CPU reason (other work took the point's
    cores) is among the reasons, each a sentence saying what was seen and what to do.
    spread=False: the samples are a distribution under study (latencies under load), judged
    on the machine's state alone; `reasons`: the point's own, added."""
    samples = [float(s) for s in samples_ms]
    if not samples and spread:
        return {}
    found, iqr_ms, ratio = list(reasons), None, None
    if spread:
        q25, median, q75 = quartiles(samples)
        iqr_ms = q75 - q25
        ratio = iqr_ms / median if median > 0 else 0.0
        if spread_is_noisy(iqr_ms, median):
            found.append(f"timing spread: IQR {iqr_ms:.3g} ms is {100 * ratio:.0f}% of the "
                         f"median {median:.3g} ms")
    contention = _cpu_reasons(samples if spread else [], conditions) \
        if on_cpu and conditions else []
    found += contention
    return {"noisy": bool(found), "contended": bool(contention), "iqr_ms": iqr_ms,
            "iqr_over_median": ratio, "reasons": found}


def _cpu_reasons(samples: list[float], conditions: dict) -> list[str]:
    """Signs that other work took this point's cores: each a sentence with what would help."""
    reasons = []
    threads, cores = conditions.get("torch_threads"), conditions.get("usable_cores")
    others = conditions.get("others_busy_cores")
    fewer_threads = max(1, (cores or 2) - 1)
    # the lab itself runs beside JupyterLab and a browser: advice a user in it can take
    others_fix = ("leave the page idle while it measures, shut down other notebooks' kernels, "
                  "or run fewer data-loader workers or ranks; the noisy figure is still shown")
    fix = (f"call torch.set_num_threads({fewer_threads}), {others_fix}"
           if threads and threads > fewer_threads else others_fix)
    if threads and cores and threads > cores:
        reasons.append(f"oversubscribed: torch uses {threads} threads on {cores} usable cores; "
                       f"{fix}")
    elif threads and cores and others is not None and (
            threads + others > cores + OVERSUBSCRIBED_MARGIN_CORES
            or _saturated(conditions) and others >= SHARED_CORES and threads + others > cores):
        reasons.append(f"oversubscribed: {threads} torch thread(s) + {others:.1f} cores busy in "
                       f"other processes (this job's own workers and ranks count) > {cores} "
                       f"cores; {fix}")
    if len(samples) < 5:
        return reasons
    fastest = min(samples)  # samples far above it lost their core for a time slice
    slow = sum(s - fastest >= _DESCHEDULED_EXCESS_MS and s >= _DESCHEDULED_RATIO * fastest
               for s in samples)
    if slow >= _DESCHEDULED_SHARE * len(samples):
        reasons.append(f"{slow} of {len(samples)} samples ran >= {_DESCHEDULED_EXCESS_MS:g} ms "
                       f"and {_DESCHEDULED_RATIO:g}x over the fastest ({fastest:.3g} ms): "
                       "the thread lost its core to other work for scheduler time slices")
    return reasons
