"""CommExplorer: collectives over message sizes, DDP comm hooks, no_sync accumulation and
bucket sizes, measured on worker ranks the panel starts and always stops.

    panel = CommExplorer()                  # 2 gloo ranks on a CPU, one rank per GPU on NCCL
    panel.run(wait=True, view="collectives", op=["all_reduce", "broadcast"],
              size_bytes=[2**10, 2**16, 2**20])
    panel.run(wait=True, view="hooks")       # allreduce, fp16, bf16, PowerSGD
    panel.run(wait=True, view="accumulation", accum_steps=[1, 2, 4])   # or view="buckets"

The CLI twins: `python -m a800lab comm collectives` and `comm ddp` (the records are rank 0's).
"""

import functools
import html
import math
from pathlib import Path

import ipywidgets as widgets
import pandas as pd

from ..core.backends import HAS_CUDA
from ..core.checks import positive_int
from ..core.knobs import knobs
from ..figures.comm import collectives_figure, ddp_figure
from ..workloads.comm.collectives import CollectiveSpec
from ..workloads.comm.ddp import HOOKS, SYNC_MODES, DDPSpec
from ..workloads.comm.runs import check_local_ranks, run_comm, run_point, start_ranks
from ..workloads.comm.worker import default_comm_backend
from .explorer import DATA_DIR, Explorer, View
from .explorer_text import table_html
from .params import Choice, Range, spec_params

# per DDP view: the figure's metrics beside samples/s, (column, axis label, divisor)
VIEW_METRICS = {
    "hooks": (("bytes_per_step", "MiB all-reduced per step (one rank)", 2**20),
              ("eval_loss", "held-out loss after training", 1.0)),
    "accumulation": (("allreduce_calls_per_step", "all-reduce calls per optimizer step", 1.0),
                     ("bytes_per_step", "MiB all-reduced per step (one rank)", 2**20)),
    "buckets": (("buckets", "buckets per synchronised backward", 1.0),
                ("eval_loss", "held-out loss after training", 1.0)),
}


def views(largest_exponent: int) -> dict[str, View]:
    """The four views; collectives sweep sizes 16x apart up to 2**largest_exponent bytes."""
    sizes = tuple(2**e for e in range(10, largest_exponent + 1, 4))
    return {
        "collectives": View("collectives", "busbw and time vs message size, one line per op",
                            "size_bytes", tuple(knobs(CollectiveSpec)), sizes, "comm",
                            columns=("algbw_gbs", "message_bytes", "pct_of_link")),
        "hooks": View("comm hooks", "DDP comm hooks: samples/s, bytes all-reduced, held-out "
                      "loss", "hook", ("hook", "powersgd_rank", "start_iter"), HOOKS, "ddp",
                      columns=("bytes_per_step", "eval_loss", "compressed")),
        "accumulation": View("no_sync", "gradient accumulation: no_sync vs every micro-batch",
                             "accum_steps", ("accum_steps", "sync"), (1, 2, 4), "ddp",
                             columns=("allreduce_calls_per_step", "bytes_per_step", "eval_loss")),
        "buckets": View("buckets", "bucket_cap_mb: samples/s, buckets, loss", "bucket_cap_mb",
                        ("bucket_cap_mb",), (0.25, 1.0, 25.0), "ddp",
                        columns=("buckets", "eval_loss")),
    }


class CommExplorer(Explorer):
    """Four views: collectives (busbw and time against size_bytes), comm hooks, no_sync and
    bucket_cap_mb.

    Each Run starts `world_size` fresh ranks (default 2 with gloo, every visible GPU with
    NCCL) and stops them whatever happens: a rank that dies ends the run at once, one that
    hangs after `timeout_s`. `keep_ranks=True` keeps them between Runs until close().
    `budget_s`, `train_steps`: per point.
    """

    def __init__(self, *, world_size: int | None = None, backend: str | None = None,
                 timeout_s: float = 60.0, keep_ranks: bool = False,
                 budget_s: float | None = None, train_steps: int | None = None,
                 title: str = "Communication: collectives, comm hooks, no_sync, buckets",
                 recorded_dir: Path | str = DATA_DIR, out: str | None = None):
        self.backend = backend or default_comm_backend()
        on_gpu = self.backend == "nccl"
        if world_size is None:
            import torch

            world_size = torch.cuda.device_count() if on_gpu else 2
        check_local_ranks(world_size, self.backend)  # the CLI's checks, before any rank starts
        for name, value in (("timeout_s", timeout_s), ("budget_s", budget_s)):
            if value is not None and not (isinstance(value, int | float) and
                                          not isinstance(value, bool) and
                                          math.isfinite(value) and value > 0):
                raise ValueError(f"{name}={value!r} must be a number of seconds > 0, e.g. 60")
        if train_steps is not None:
            positive_int("train_steps", train_steps, "10")
        self.world_size, self.timeout_s = world_size, timeout_s
        self.keep_ranks, self._ranks = keep_ranks, None
        self.settings = {"budget_s": budget_s or (0.3 if on_gpu else 0.1)}
        self.ddp_settings = {**self.settings, "train_steps": train_steps or (50 if on_gpu else 10)}
        device = "cuda" if on_gpu and HAS_CUDA else "cpu"
        declared = {**knobs(CollectiveSpec), **knobs(DDPSpec)}
        divisors = tuple(d for d in range(1, world_size + 1) if world_size % d == 0)
        params = {  # the fields' own checks; these offer the values worth trying here
            **spec_params(CollectiveSpec, device, ("op",)),
            "size_bytes": Range(2**10, 2**30 if on_gpu else 2**26, default=2**20, scale="pow2",
                                check_with=declared["size_bytes"].check),
            **spec_params(CollectiveSpec, device, ("dtype",)),
            "ranks_per_node": Choice(divisors, divisors[-1], declared["ranks_per_node"].check),
            **spec_params(DDPSpec, device, ("hook", "powersgd_rank", "start_iter",
                                            "accum_steps", "sync"),
                          initial={"powersgd_rank": 4, "accum_steps": 4}),
            "bucket_cap_mb": Choice((0.25, 1.0, 4.0, 25.0, 100.0), 25.0,
                                    declared["bucket_cap_mb"].check),
        }
        # Explorer's workload: one point on a fresh group. A Run does better (_sweep): one
        # group for all its points, and the records rank 0 made.
        self.ops = widgets.Text(description="ops", value="all_reduce",
                                placeholder="e.g. all_reduce, all_gather, broadcast")
        super().__init__(functools.partial(run_point, "comm"), params, sweep="size_bytes",
                         name="comm", device=device, cpu_threads=1, title=title,
                         recorded_dir=recorded_dir, out=out, views=views(30 if on_gpu else 22),
                         extras={"after_controls": [self.ops]})

    def _on_view(self) -> None:
        super()._on_view()
        collectives = self.view.value == "collectives"
        self.ops.layout.display = None if collectives else "none"
        if collectives:
            self.controls["op"].disabled = True  # the ops box lists them

    def _conditions(self) -> str:
        where = "GPUs, NCCL" if self.backend == "nccl" else \
            "CPU fallback, gloo, 1 torch thread each"
        return f"{self.world_size} ranks ({where})"

    def _plan(self, overrides: dict) -> tuple[dict, dict]:
        """In the collectives view `op` may be a list; the accumulation view runs both syncs."""
        view = self.view.value
        overrides = dict(overrides)
        ops = self._values_of(overrides, "op", self.ops) if view == "collectives" else None
        axes, fixed = super()._plan(overrides)
        fixed = {k: v for k, v in fixed.items() if k in self.views[view].params}
        if view == "collectives":
            fixed.pop("op", None)
            axes = {"op": ops, **axes}  # one op's sizes after another: a line at a time
        if view == "accumulation":
            fixed.pop("sync", None)
            axes["sync"] = list(SYNC_MODES)
        return axes, fixed

    def _sweep(self, axes: dict, fixed: dict, run_id: str):
        collectives = self.view.value == "collectives"
        if self.keep_ranks and (self._ranks is None or not self._ranks.running):
            self._ranks = start_ranks(self.world_size, self.backend, 1, self.timeout_s)
        return run_comm("comm" if collectives else "ddp", axes, fixed=fixed,
                        world_size=self.world_size, backend=self.backend,
                        settings=self.settings if collectives else self.ddp_settings,
                        run_id=run_id, timeout_s=self.timeout_s,
                        on_progress=self._on_progress, on_result=self._on_result,
                        cancel=self.job.cancel, group=self._ranks)

    def close(self) -> None:
        """Stop the ranks kept between Runs (keep_ranks=True); refused during a run."""
        if self.running:
            self.status.say("A run is in progress: press Stop or wait before close().", "warn")
            return
        if self._ranks is not None:
            self._ranks.close()
            self._ranks = None

    def _of_view(self, df: pd.DataFrame) -> pd.DataFrame:
        """This view's points: its workload, its axis set, no other view's settings."""
        rows, view = super()._of_view(df), self.views[self.view.value]
        if rows.empty or "workload" not in rows:
            return rows
        rows = rows[rows[view.axis].notna()] if view.axis in rows else rows.iloc[0:0]
        for other in self.views.values():
            for name in other.params:
                if name in rows and name not in view.params:
                    rows = rows[rows[name].isna()]
        return rows

    def _figure(self, df: pd.DataFrame, x: str, series: str):
        view, earlier = self.view.value, self.earlier_runs.value
        if view == "collectives":
            return collectives_figure(df, series="op" if "op" in df else series,
                                      earlier_runs=earlier)
        if view == "accumulation":
            series = "sync"
        if series not in df:
            series = "label" if "label" in df else None
        return ddp_figure(df, self.views[view].axis, series=series, metrics=VIEW_METRICS[view],
                          log_x=view == "buckets", earlier_runs=earlier)

    def _table_html(self, measured: pd.DataFrame) -> str:
        shown, view = self._of_view(measured), self.views[self.view.value]
        if shown.empty:
            return html.escape("no points of this view yet")
        note = "" if view.workload != "comm" or self.backend == "nccl" else (
            "<small>gloo on one machine: the ranks talk over loopback TCP, so these are CPU "
            "and kernel numbers, not a network's or NVLink's.</small>")
        return note + table_html(shown, [*view.params, "world_size"], self._run_numbers(),
                                 measured=("throughput", *view.columns),
                                 more=("median_ms", "iqr_ms"))
