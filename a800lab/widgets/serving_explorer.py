"""ServingExplorer: the latency and throughput of a model's inference, under load as its
clients meet it, decode's bound, streams sharing the device, and the config with the most
goodput under a latency target.

    panel = ServingExplorer()                                  # the transformer preset
    panel.run(wait=True, batch_size=[1, 8, 64], precision="fp32")   # latency view
    panel.run(wait=True, view="load", load=[0.2, 0.6, 0.9, 1.2], max_batch=8)  # open loop
    panel.run(wait=True, view="concurrency", streams=[1, 2, 4])     # or view="decode"
    panel.run(wait=True, view="tune", p99_target_ms=5.0)       # online: panel.tune_outcome
    ServingExplorer(make_model=my_model, make_batch=my_batch)  # your model (not in decode)

Command-line twins: `sweep serve`, `sweep load`, `sweep decode`, `sweep concurrency`,
`tune serve` (`--offline`: the tune view with offline=True).
"""

import functools
import html
from dataclasses import replace
from pathlib import Path

import ipywidgets as widgets
import pandas as pd

from ..core.backends import resolve_device
from ..core.checks import positive_float
from ..core.knobs import knobs, levers
from ..core.sweep import SweepResult, grid, thread_count
from ..figures.serving import concurrency_figure, decode_figure, serving_figure
from ..figures.serving_generate import generation_figure
from ..figures.serving_load import load_figure
from ..figures.tune import frontier_figure
from ..workloads.models.task import CUSTOM
from ..workloads.models.user_model import panel_task
from ..workloads.serving.arrivals import ARRIVALS, Arrivals
from ..workloads.serving.concurrency import concurrency_point
from ..workloads.serving.decode import decode_point
from ..workloads.serving.generate import SCHEDULERS, GenerateSpec, generate_point, generator_context
from ..workloads.serving.load import Batcher, default_duration_s, load_point
from ..workloads.serving.online import default_batcher_axes, tune_online
from ..workloads.serving.point import serve_point
from ..workloads.serving.spec import (
    DEFAULT_REQUESTS,
    ServeRun,
    ServeSpec,
    check_serving_task,
    serving_unavailable,
)
from ..workloads.serving.tune import default_axes, tune_serve
from .explorer import DATA_DIR, Explorer, View
from .explorer_text import table_html
from .params import Choice, spec_params
from .training_tools import code_html

SPEC_FIELDS, LEVERS = tuple(knobs(ServeSpec)), levers(ServeSpec)
CONFIG = tuple(name for name in SPEC_FIELDS if name not in LEVERS)  # the model, batch, precision
BATCHER = ("max_batch", "max_delay_ms")
ARRIVING = ("arrival", "burstiness", "duration_s")
TUNED = ("precision", "graphs")  # what the tune view varies beside its controls
LOAD_SERIES = ("model", "size", *BATCHER, "precision", *LEVERS, *ARRIVING)
GENERATION = ("size", "rate_rps", "scheduler", "max_batch", "prompt_tokens", "output_tokens",
              "precision", *ARRIVING)
VIEWS = {
    "latency": View("latency vs samples/s", "samples/s vs p99 per config across batch sizes; "
                    "the newest point's latency histogram", "batch_size", SPEC_FIELDS,
                    (1, 8, 64), "serve", columns=("p50_ms", "p99_ms", "requests", "rel_error",
                                                  "compile_s", "capture_s")),
    "load": View("under load", "latency from each request's arrival vs offered rate; where "
                 "the time goes", "load", (*LOAD_SERIES, "load", "rate_rps", "p99_target_ms"),
                 (0.1, 0.3, 0.5, 0.7, 0.9, 1.1), "load", series=LOAD_SERIES,
                 columns=("offered_rate", "achieved_rate", "p50_ms", "p99_ms", "queue_p99_ms",
                          "service_p99_ms", "mean_batch", "busy_share", "saturated")),
    "generate": View("generation", "generation under load: TTFT and TPOT vs offered rate, "
                     "static vs continuous batching", "rate_rps", GENERATION, (20, 50, 100),
                     "generate", series=("scheduler", "max_batch", "size", "precision"),
                     columns=("offered_rate", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms",
                              "tpot_p99_ms", "tokens_per_s", "mean_batch", "saturated")),
    "decode": View("decode", "decode: ms per token and tokens/s vs batch, bandwidth bounds "
                   "dashed", "batch_size", ("size", "batch_size", "precision"), (1, 4, 16),
                   "decode", columns=("ms_per_token", "bound_ms_measured",
                                      "bound_ms_datasheet", "pct_of_bound", "rel_error")),
    "concurrency": View("streams", "N streams: samples/s of all together and p99 vs streams",
                        "streams", (*CONFIG, "streams"), (1, 2, 4), "concurrency",
                        columns=("p50_ms", "p99_ms", "requests", "mps")),
    "tune": View("tune for a target", "tuning for the latency target: goodput per config "
                 "(online) or samples/s vs batch p99 (offline)", "max_batch",
                 ("model", "size", "max_batch", "compile", "p99_target_ms", "percentile",
                  "offline", "arrival", "burstiness", "duration_s"), (1, 4, 16, 64),
                 None, series=("model", "size", "max_batch", "compile", *TUNED),
                 columns=("precision", "graphs", "offered_rate", "p50_ms", "p99_ms",
                          "saturated")),
}
NOTES = {
    "latency": "Each point: outputs checked against fp32, warm-up (compile, graph capture) "
               "timed apart, then >= {requests} requests timed back to back (closed loop). "
               "Twin: python -m a800lab sweep serve ...",
    "load": "Requests arrive on their own clock (arrival, for duration_s each point) at a "
            "dynamic batcher (max_batch, max_delay_ms); latency counts from each request's "
            "scheduled arrival. load: a fraction of the closed-loop capacity at max_batch, "
            "measured first (or sweep rate_rps). Twin: python -m a800lab sweep load ...",
    "generate": "Requests with prompt and output lengths drawn (N, or LO:HI uniform) arrive "
                "on their own clock; a static batch runs until its longest request ends, "
                "continuous batching refills a finished slot at the next step. TTFT and TPOT "
                "count from each request's scheduled arrival. Twin: python -m a800lab sweep "
                "generate ...",
    "decode": "The transformer preset (GPT-2 small's shape on a GPU) generating from a KV "
              "cache; dashed: bytes read per step / bandwidth. Twin: python -m a800lab sweep "
              "decode ...",
    "concurrency": "N servers (threads, own CUDA stream each) answering together; MPS read, "
                   "never changed. Twin: python -m a800lab sweep concurrency ...",
    "tune": "Online (default): the config and batcher with the most goodput, the highest "
            "request rate whose percentile meets p99_target_ms, over the max batches typed, "
            "the device's precisions and delays 0 and a tenth of the target; the winner "
            "offered that rate again. offline=True: the most samples/s whose batch p99 meets "
            "it (the values typed are batch sizes). Twin: python -m a800lab tune serve "
            "--p99-ms X [--offline]",
}


class ServingExplorer(Explorer):
    """Six views, each a Run of its own: latency (samples/s against p99, closed loop), load
    (latency from arrival against offered rate, open loop), generation (TTFT and TPOT under
    load, static vs continuous batching), decode (ms per token against its bandwidth bound),
    concurrency (streams sharing the device) and tune (goodput under a latency target, or
    offline the most samples/s; the code to paste).

    Your own model as for TrainingExplorer (its output (batch, ...); `user_model=` a file).
    `requests`: timed per point at least (>= 100); `budget_s`: timing budget per point.
    """

    def __init__(self, *, make_model=None, make_batch=None, user_model: str | None = None,
                 model: str = "transformer",
                 size: str | None = None, device: str = "auto",
                 requests: int = DEFAULT_REQUESTS, budget_s: float | None = None,
                 cpu_threads: int | None = None,
                 title: str = "Serving: latency, load, throughput and the batch you can afford",
                 recorded_dir: Path | str = DATA_DIR, out: str | None = None):
        device = resolve_device(device)
        on_cpu = device == "cpu"
        self.task, fault = panel_task(user_model, make_model, make_batch, device=device,
                                      check=check_serving_task)
        yours = user_model is not None or make_model is not None
        if budget_s is not None:
            positive_float("budget_s", budget_s, "0.3")
        ServeRun(requests=requests)
        self.settings = {"requests": requests, "budget_s": budget_s or (0.1 if on_cpu else 0.3)}
        fields = functools.partial(spec_params, device=device)
        params = {
            **fields(ServeSpec, names=SPEC_FIELDS, initial={"model": model, "size": size},
                     fixed={"model": CUSTOM, "size": CUSTOM} if yours else {}),
            **fields(ServeRun, names=("streams",)), **fields(Batcher, names=BATCHER),
            **fields(ServeRun, names=("load",), initial={"load": 0.5}),
            **fields(Arrivals, names=("rate_rps", *ARRIVING),
                     initial={"duration_s": default_duration_s(device) / 2}),
            "p99_target_ms": fields(ServeRun, names=("p99_ms",), initial={
                "p99_ms": 5.0 if on_cpu else 20.0})["p99_ms"],
            "percentile": Choice((50.0, 90.0, 95.0, 99.0, 99.9), 99.0,
                                 knobs(ServeRun)["percentile"].check),
            "offline": Choice((False, True)),
            "scheduler": Choice(("both", *SCHEDULERS), default="both"),
            **fields(GenerateSpec, names=("prompt_tokens", "output_tokens")),
        }  # a trace needs its file: the panel offers the drawn arrivals
        params["arrival"] = replace(params["arrival"], values=ARRIVALS[:-1])
        self.tune_outcome, self._target_ms = None, None
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
        if view in ("decode", "generate") and self.task is not None:
            raise ValueError(f"{view} runs the transformer preset from a KV cache, not your "
                             "model: use a panel without make_model= for it (your own "
                             "generator: python -m a800lab sweep generate --user-model)")
        axes, fixed = super()._plan(overrides)
        fixed = {k: v for k, v in fixed.items() if k in VIEWS[view].params}
        if view == "generate":
            if fixed.get("scheduler") == "both":  # the two compared side by side
                del fixed["scheduler"]
                axes["scheduler"] = list(SCHEDULERS)
            for point in grid(axes):  # a request longer than the context: refused now
                config = {**fixed, **point}
                GenerateSpec(**{k: config[k] for k in knobs(GenerateSpec)}).fit(
                    *generator_context(config["size"]))
        if view == "load":  # the offered rate: the swept one of rate_rps and load
            fixed.pop("load" if "rate_rps" in axes else "rate_rps", None)
        if view in ("latency", "concurrency", "load"):  # a config the device refuses: now
            for point in grid(axes):
                config = {k: v for k, v in {**fixed, **point}.items() if k in SPEC_FIELDS}
                if view == "load":
                    config["batch_size"] = {**fixed, **point}["max_batch"]
                reason = serving_unavailable(ServeSpec(**config), self.device)
                if reason:
                    raise ValueError(reason)
        return axes, fixed

    def _sweep(self, axes: dict, fixed: dict, run_id: str) -> SweepResult:
        view = self.view.value
        if view == "tune":
            return self._tune(axes, fixed, run_id)
        common = {"device": self.device}
        if view == "load":
            self._target_ms = fixed.pop("p99_target_ms")
        if fixed.get("arrival") != "gamma":
            fixed.pop("burstiness", None)
        point = {"latency": functools.partial(serve_point, task=self.task, **common,
                                              **self.settings),
                 "load": functools.partial(load_point, task=self.task, **common,
                                           budget_s=self.settings["budget_s"]),
                 "generate": functools.partial(generate_point, **common),
                 "decode": functools.partial(decode_point, budget_s=self.settings["budget_s"],
                                             **common),
                 "concurrency": functools.partial(concurrency_point, task=self.task, **common,
                                                  requests=self.settings["requests"])}[view]
        return super()._sweep(axes, fixed, run_id, point, VIEWS[view].workload)

    def _tune(self, axes: dict, fixed: dict, run_id: str) -> SweepResult:
        self.tune_outcome, self.tune_text.value = None, ""
        count = [0]

        def trial(record) -> None:
            count[0] += 1
            self.progress.max = max(self.progress.max, count[0])
            self.progress.value = count[0]
            self.progress_text.value = f"trial {count[0]}: {record.outcome}"
            self._on_result(record)

        model = {"model": fixed["model"], "size": None if self.task else fixed["size"]}
        defaults = default_axes(self.device)
        graphed = fixed["compile"] in ("reduce-overhead", "max-autotune")  # CUDA graphs of its own
        levers = {"precision": defaults["precision"], "compile": [fixed["compile"]],
                  "graphs": [g for g in defaults["graphs"] if not (g and graphed)]}
        with thread_count(self.torch_threads):
            if fixed["offline"]:
                outcome = tune_serve(fixed["p99_target_ms"], self.task, **model,
                                     axes={**defaults, "batch_size": axes["max_batch"], **levers},
                                     device=self.device, on_trial=trial,
                                     cancel=self.job.cancel, run_id=run_id, **self.settings)
            else:
                batchers = {**default_batcher_axes(self.device, fixed["p99_target_ms"]),
                            "max_batch": axes["max_batch"]}
                outcome = tune_online(
                    fixed["p99_target_ms"], self.task, **model, axes=levers,
                    batcher_axes=batchers, percentile=fixed["percentile"],
                    arrival=fixed["arrival"], burstiness=fixed["burstiness"],
                    duration_s=fixed["duration_s"], device=self.device, on_trial=trial,
                    cancel=self.job.cancel, run_id=run_id,
                    budget_s=self.settings["budget_s"])
        self.progress.max = self.progress.value = max(count[0], 1)
        self.tune_outcome = outcome
        # the command's own words (tune serve prints the same summary), then the code
        self.tune_text.value = f"<pre>{html.escape(outcome.summary())}</pre>" + (
            code_html(outcome.snippet) if outcome.snippet else "")
        return SweepResult(records=outcome.records, total=len(outcome.records), run_id=run_id,
                           cancelled=outcome.cancelled)

    def _work(self, *args, **kwargs) -> None:
        super()._work(*args, **kwargs)
        outcome = self.tune_outcome
        if self.view.value == "tune" and outcome is not None and outcome.winner is None:
            self.status.say(f"{self.status_text} No config met the target: the answer below "
                            "says why.", "warn")  # never green for a tune without a winner

    def clear(self) -> int:
        """As Explorer.clear; the tuner's outcome goes too."""
        if not self.running:
            self.tune_outcome, self.tune_text.value = None, ""
        return super().clear()

    def _of_view(self, df: pd.DataFrame) -> pd.DataFrame:
        if self.view.value != "tune" or df.empty or "workload" not in df:
            return super()._of_view(df)
        return df[df["workload"].isin(("tune-serve", "tune-load"))]

    def _measured_frame(self) -> pd.DataFrame:
        """This view's points, without other views' parameters (the caption names only what
        differs among this view's controls)."""
        frame = self._of_view(super()._measured_frame())
        keep = {*VIEWS[self.view.value].params, *TUNED, "batch_size", "rate_rps", "max_delay_ms"}
        return frame.drop(columns=[p for p in self.params if p not in keep and p in frame])

    def _figure(self, df: pd.DataFrame, x: str, series: str):
        view = self.view.value
        outcome = self.tune_outcome
        if view == "tune" and outcome is not None and not hasattr(outcome, "searches"):
            return frontier_figure(outcome)  # offline: samples/s against batch p99
        if view == "tune" and outcome is not None:  # online: each search as a load curve
            searched = df[df["workload"] == "tune-load"]
            return load_figure(searched, earlier_runs=self.earlier_runs.value,
                               target_ms=outcome.target_ms, goodput_rps=outcome.goodput_rps)
        if view == "load":
            return load_figure(df, series=series, earlier_runs=self.earlier_runs.value,
                               target_ms=self._target_ms)
        draw = {"latency": serving_figure, "decode": decode_figure,
                "generate": generation_figure,
                "concurrency": concurrency_figure, "tune": serving_figure}[view]
        return draw(df, series=series, earlier_runs=self.earlier_runs.value)

    def _caption_note(self, measured: pd.DataFrame, x: str) -> str:
        """The tune view's answer says what ran (its table names every config)."""
        return "" if self.view.value == "tune" else super()._caption_note(measured, x)

    def _table_html(self, measured: pd.DataFrame) -> str:
        shown, view = self._of_view(measured), VIEWS[self.view.value]
        if shown.empty:
            return html.escape("no points of this view yet")
        columns = [p for p in view.params if p not in ("p99_target_ms", "percentile",
                                                       "offline") and p in shown] + \
            [c for c in view.columns if c in shown]
        return table_html(shown, list(dict.fromkeys(columns)), self._run_numbers())
