"""ServingExplorer: the latency and throughput of a model's inference, decode's bound, streams
sharing the device, and the best config under a p99 target.

    panel = ServingExplorer()                                  # the transformer preset
    panel.run(wait=True, batch_size=[1, 8, 64], precision="fp32")   # latency view
    panel.run(wait=True, view="concurrency", streams=[1, 2, 4])     # or view="decode"
    panel.run(wait=True, view="tune", p99_target_ms=5.0)       # panel.tune_outcome, the code
    ServingExplorer(make_model=my_model, make_batch=my_batch)  # your model (not in decode)

Command-line twins: `sweep serve`, `sweep decode`, `sweep concurrency`, `tune serve`.
"""

import functools
import html
from pathlib import Path

import ipywidgets as widgets
import pandas as pd

from ..core.backends import resolve_device, torchvision_reason
from ..core.sweep import SweepResult, grid, thread_count
from ..figures.serving import concurrency_figure, decode_figure, serve_tune_figure, serving_figure
from ..workloads.serving.concurrency import concurrency_point
from ..workloads.serving.decode import decode_point
from ..workloads.serving.point import serve_point
from ..workloads.serving.spec import (
    DEFAULT_REQUESTS,
    MIN_REQUESTS,
    ServeSpec,
    check_serving_task,
    serve_precisions_for,
    serving_unavailable,
)
from ..workloads.serving.tune import default_axes, describe_serving, tune_serve
from ..workloads.training.levers import COMPILE_MODES
from ..workloads.training.models import MODELS, SIZES, default_size
from ..workloads.training.spec import positive_float
from ..workloads.training.task import CUSTOM
from ..workloads.training.user_model import panel_task
from .explorer import DATA_DIR, Explorer, View
from .explorer_text import table_html
from .params import Choice, Fixed, Range
from .training_tools import code_html, rows_table

CONFIG = ("model", "size", "batch_size", "precision")
SPEC_FIELDS = (*CONFIG, "compile", "graphs", "channels_last")
TUNED = ("precision", "graphs")  # what the tune view varies beside its controls
VIEWS = {
    "latency": View("latency vs samples/s", "samples/s vs p99 per config across batch sizes; "
                    "the newest point's latency histogram", "batch_size", SPEC_FIELDS,
                    (1, 8, 64), "serve", columns=("p50_ms", "p99_ms", "requests", "rel_error",
                                                  "compile_s", "capture_s")),
    "decode": View("decode", "decode: ms per token and tokens/s vs batch, bandwidth bounds "
                   "dashed", "batch_size", ("size", "batch_size", "precision"), (1, 4, 16),
                   "decode", columns=("ms_per_token", "bound_ms_measured",
                                      "bound_ms_datasheet", "pct_of_bound", "rel_error")),
    "concurrency": View("streams", "N streams: samples/s of all together and p99 vs streams",
                        "streams", (*CONFIG, "streams"), (1, 2, 4), "concurrency",
                        columns=("p50_ms", "p99_ms", "requests", "mps")),
    "tune": View("tune under a p99", "tuning under the p99 target: every trial, the frontier, "
                 "the winner re-measured", "batch_size",
                 ("model", "size", "batch_size", "compile", "p99_target_ms"), (1, 4, 16, 64),
                 "tune-serve", series=("model", "size", "batch_size", "compile", *TUNED),
                 columns=("precision", "graphs", "p50_ms", "p99_ms", "meets_target",
                          "budget_s")),
}
NOTES = {
    "latency": "Each point: outputs checked against fp32, warm-up (compile, graph capture) "
               "timed apart, then >= {requests} requests timed. Twin: python -m a800lab sweep "
               "serve ...",
    "decode": "The transformer preset (GPT-2 small's shape on a GPU) generating from a KV "
              "cache; dashed: bytes read per step / bandwidth. Twin: python -m a800lab sweep "
              "decode ...",
    "concurrency": "N servers (threads, own CUDA stream each) answering together; MPS read, "
                   "never changed. Twin: python -m a800lab sweep concurrency ...",
    "tune": "The most samples/s whose p99 meets p99_target_ms, over the batch sizes typed and the "
            "device's precisions; the winner measured again. Twin: python -m a800lab tune "
            "serve --p99-ms X",
}


class ServingExplorer(Explorer):
    """Four views, each a Run of its own: latency (samples/s against p99), decode (ms per
    token against its bandwidth bound), concurrency (streams sharing the device) and tune
    (tune_serve over the batch sizes typed, and the code to paste).

    Your own model as for TrainingExplorer (its output (batch, ...); `user_model=` a file).
    `requests`: timed per point at least (>= 100); `budget_s`: timing budget per point.
    """

    def __init__(self, *, make_model=None, make_batch=None, user_model: str | None = None,
                 model: str = "transformer",
                 size: str | None = None, device: str = "auto",
                 requests: int = DEFAULT_REQUESTS, budget_s: float | None = None,
                 cpu_threads: int | None = None,
                 title: str = "Serving: latency, samples/s and the batch you can afford",
                 recorded_dir: Path | str = DATA_DIR, out: str | None = None):
        device = resolve_device(device)
        on_cpu = device == "cpu"
        self.task, fault = panel_task(user_model, make_model, make_batch, device=device,
                                      check=check_serving_task)
        yours = user_model is not None or make_model is not None
        if budget_s is not None:
            positive_float("budget_s", budget_s, "0.3")
        if isinstance(requests, bool) or not isinstance(requests, int) or \
                requests < MIN_REQUESTS:
            raise ValueError(f"requests={requests!r} must be an int >= {MIN_REQUESTS}")
        self.settings = {"requests": requests, "budget_s": budget_s or (0.1 if on_cpu else 0.3)}
        models = (*MODELS, *(() if torchvision_reason() else ("resnet50",)))
        sizes = (*SIZES, "gpt2_small", *(() if torchvision_reason() else ("224",)))
        params = {
            "model": Fixed(CUSTOM) if yours else Choice(models, default=model),
            "size": Fixed(CUSTOM) if yours else
            Choice(sizes, default=size or default_size(device)),
            "batch_size": Range(1, 4096, default=8, scale="pow2"),
            "precision": Choice(tuple(serve_precisions_for(device)), default="fp32"),
            "compile": Choice(COMPILE_MODES, default="off"),
            "graphs": Choice((False, True)),
            "channels_last": Choice((False, True)),
            "streams": Range(1, 64, default=2, scale="pow2"),
            "p99_target_ms": Range(0.01, 100_000.0, default=5.0 if on_cpu else 20.0,
                                   scale="log"),
        }
        self.tune_outcome = None
        self.note, self.tune_text = widgets.HTML(""), widgets.HTML("")
        # Explorer's workload: each view's Run calls its own point function (_sweep)
        super().__init__(lambda **params: {}, params, sweep="batch_size", name="serve",
                         device=device, cpu_threads=cpu_threads, title=title,
                         recorded_dir=recorded_dir, out=out, views=VIEWS,
                         extras={"after_controls": [self.note], "after_plot": [self.tune_text]})
        self._refuse_every_run(fault)

    def _on_view(self) -> None:
        super()._on_view()
        view = self.view.value
        self.note.value = f"<small>{html.escape(NOTES[view].format(**self.settings))}</small>"
        self.tune_text.layout.display = None if view == "tune" else "none"

    def _plan(self, overrides: dict) -> tuple[dict, dict]:
        view = self.view.value
        if view == "decode" and self.task is not None:
            raise ValueError("decode runs the transformer preset from a KV cache, not your "
                             "model: use a panel without make_model= for it")
        axes, fixed = super()._plan(overrides)
        fixed = {k: v for k, v in fixed.items() if k in VIEWS[view].params}
        if view in ("latency", "concurrency"):  # a config this device refuses: said now
            for point in grid(axes):
                config = {k: v for k, v in {**fixed, **point}.items() if k in SPEC_FIELDS}
                reason = serving_unavailable(ServeSpec(**config), self.device)
                if reason:
                    raise ValueError(reason)
        return axes, fixed

    def _sweep(self, axes: dict, fixed: dict, run_id: str) -> SweepResult:
        view = self.view.value
        if view == "tune":
            return self._tune(axes, fixed, run_id)
        common = {"device": self.device}
        point = {"latency": functools.partial(serve_point, task=self.task, **common,
                                              **self.settings),
                 "decode": functools.partial(decode_point, budget_s=self.settings["budget_s"],
                                             **common),
                 "concurrency": functools.partial(concurrency_point, task=self.task, **common,
                                                  requests=self.settings["requests"])}[view]
        return super()._sweep(axes, fixed, run_id, point, VIEWS[view].workload)

    def _tune(self, axes: dict, fixed: dict, run_id: str) -> SweepResult:
        self.tune_outcome, self.tune_text.value = None, ""
        grid = {**default_axes(self.device), "batch_size": axes["batch_size"],
                "compile": [fixed["compile"]]}
        grid["graphs"] = [g for g in grid["graphs"] if not (
            g and fixed["compile"] in ("reduce-overhead", "max-autotune"))]
        count = [0]

        def trial(record) -> None:
            count[0] += 1
            self.progress_text.value = f"trial {count[0]}: {record.outcome}"
            self._on_result(record)

        with thread_count(self.torch_threads):
            outcome = tune_serve(fixed["p99_target_ms"], self.task, model=fixed["model"],
                                 size=None if self.task else fixed["size"], axes=grid,
                                 device=self.device, on_trial=trial, cancel=self.job.cancel,
                                 run_id=run_id, **self.settings)
        self.tune_outcome = outcome
        self._show_tune(outcome)
        return SweepResult(records=outcome.records, total=len(outcome.records), run_id=run_id,
                           cancelled=outcome.search.cancelled)

    def _show_tune(self, outcome) -> None:
        again = outcome.remeasured
        rows = [("target", f"p99 <= {outcome.p99_ms:g} ms"),
                ("winner", describe_serving(outcome.winner) if outcome.winner else
                 "none met the target when measured again"),
                ("re-measured", f"{again['samples_per_s']:.4g} samples/s, p50 "
                                f"{again['p50_ms']:.3g} ms, p99 {again['p99_ms']:.3g} ms, "
                                f"{again['requests']} requests" if again else "-"),
                ("noise", f"within noise of {len(outcome.search.rivals)} other config(s)"
                 if outcome.search.rivals else "clear of the noise"),
                ("contended", outcome.search.contended or "no")]
        self.tune_text.value = rows_table(rows) + (code_html(outcome.snippet)
                                                   if outcome.snippet else "")

    def clear(self) -> int:
        """As Explorer.clear; the tuner's outcome goes too."""
        if not self.running:
            self.tune_outcome, self.tune_text.value = None, ""
        return super().clear()

    def _measured_frame(self) -> pd.DataFrame:
        """This view's points, without other views' parameters (the caption names only what
        differs among this view's controls)."""
        frame = self._of_view(super()._measured_frame())
        keep = {*VIEWS[self.view.value].params, *TUNED}
        return frame.drop(columns=[p for p in self.params if p not in keep and p in frame])

    def _figure(self, df: pd.DataFrame, x: str, series: str):
        view = self.view.value
        if view == "tune" and self.tune_outcome is not None:  # None while a tuning runs
            return serve_tune_figure(self.tune_outcome)
        draw = {"latency": serving_figure, "decode": decode_figure,
                "concurrency": concurrency_figure, "tune": serving_figure}[view]
        return draw(df, series=series, earlier_runs=self.earlier_runs.value)

    def _table_html(self, measured: pd.DataFrame) -> str:
        shown, view = self._of_view(measured), VIEWS[self.view.value]
        if shown.empty:
            return html.escape("no points of this view yet")
        columns = [p for p in view.params if p != "p99_target_ms"] + \
            [c for c in view.columns if c in shown]
        return table_html(shown, list(dict.fromkeys(columns)), self._run_numbers())
