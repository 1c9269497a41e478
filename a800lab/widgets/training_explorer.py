"""TrainingExplorer: vary a training step's batch, accumulation, precision and checkpointing,
press Run, see samples/s, where the memory goes, and whether it still learns.

    from a800lab.widgets import TrainingExplorer
    panel = TrainingExplorer()                          # preset models on generated data
    panel.run(wait=True, batch_size=[8, 32, 128], precision="bf16")
    panel.find_max_batch(wait=True, target_batch=1024)  # the "find max batch" button
    panel.max_batch_result.summary()
    panel.profile(wait=True, batch_size=4)              # the "Profile step" button
    panel.tune(wait=True, target_batch=256)             # the "Tune" button
    TrainingExplorer(make_model=my_model, make_batch=my_batch, loss_fn=my_loss)   # your model

Each point (a800lab.workloads.training.point.train_point) trains a fresh model for a few optimizer
steps (the loss curve), counts its memory breakdown, predicts its peak from two smaller probes,
then times whole optimizer steps. The plot: throughput (one line per series and run, the IQR
shaded, noisy points hollow) above the stacked memory breakdown (with the predicted and measured
peaks) and the loss curves; the title names the device and mode; the table shows samples/s,
peaks, loss and accuracy, and behind its toggle each point's achieved TFLOP/s and MFU (against
the datasheet and the measured peak). The max-batch search, the profile (a stacked bar per
profiled config, one step's timeline) and the tuner (frontier, winner, the code to paste) run
on the panel's thread like a Run (Stop ends them between steps) and draw in their own tabs
beside Run's controls. Command-line twins: `sweep train`, `max-batch`, `profile` and `tune
train`.
"""

from __future__ import annotations

import functools
import html
import io
import threading
from dataclasses import replace
from pathlib import Path

import ipywidgets as widgets
import pandas as pd

from ..core.backends import resolve_device
from ..core.cancel import Cancelled, CancelToken
from ..core.sweep import thread_count
from ..core.units import MIB, format_bytes
from ..core.window import harness_work
from ..figures.training import max_batch_figure, training_figure
from ..workloads.training.levers import ATTENTION_BACKENDS, COMPILE_MODES, OPTIMIZER_IMPLS
from ..workloads.training.max_batch import (
    DEFAULT_MARGIN,
    MaxBatchResult,
    default_limit_bytes,
    find_max_batch_for,
)
from ..workloads.training.models import MODELS, SIZES, default_size, describe_sizes
from ..workloads.training.point import train_point
from ..workloads.training.profile import profile_step
from ..workloads.training.spec import (
    OPTIMIZERS,
    TrainSpec,
    positive_float,
    positive_int,
    precisions_for,
)
from ..workloads.training.task import CUSTOM, check_task, custom_task
from ..workloads.training.tune import describe_candidate, noise_clause, tune_train
from .explorer import DATA_DIR, Explorer
from .explorer_text import run_numbers, table_html
from .layout import show_section, whole
from .params import Choice, Fixed, Range
from .training_tools import ProfileBox, TuneBox, trial_text

# per mode: optimizer steps trained per point (the loss curve), timing budget per point
CPU_DEFAULTS = {"train_steps": 20, "budget_s": 0.1}
GPU_DEFAULTS = {"train_steps": 50, "budget_s": 0.3}
# the results table: what was measured first (fits a notebook), the rest behind a toggle
_MEASURED = ("throughput", "step_peak_bytes", "predicted_peak_bytes", "eval_loss", "accuracy")
_MORE = ("effective_batch", "median_ms", "iqr_ms", "achieved_tflops",
         "mfu_pct_of_datasheet_peak", "mfu_pct_of_measured_peak", "skipped_steps", "compile_s",
         "recompiles")


class TrainingExplorer(Explorer):
    """The training-step panel (see the module docstring).

    Presets: `model` ("mlp", "transformer", "cnn") and `size` ("tiny" on a CPU, "medium" on a
    GPU) start the controls. Your own model: `make_model()` -> nn.Module, `make_batch(batch_size)`
    -> (inputs, targets) (also given `device=` / `generator=` if it takes them), `loss_fn(outputs,
    targets)` (default cross-entropy), `accuracy_fn` (default: argmax accuracy whenever the
    targets are class labels, whatever the loss); they are dry-run on a batch of 2 when the
    panel is built, so a mistake is an error here, before anything is measured. `train_steps`
    and `budget_s` default to a few seconds per point on a CPU; `lr` is every point's learning
    rate (default: the preset's, 1e-3 for your own model). The rest as for Explorer (`device`,
    `cpu_threads`, `title`, `recorded_dir`, `out`).
    """

    def __init__(self, *, make_model=None, make_batch=None, loss_fn=None, accuracy_fn=None,
                 model: str = "transformer", size: str | None = None, device: str = "auto",
                 sweep: str = "batch_size", train_steps: int | None = None,
                 budget_s: float | None = None, lr: float | None = None,
                 cpu_threads: int | None = None,
                 title: str = "Training step: samples/s, memory and loss",
                 recorded_dir: Path | str = DATA_DIR, out: str | None = None):
        device = resolve_device(device)
        on_cpu = device == "cpu"
        defaults = CPU_DEFAULTS if on_cpu else GPU_DEFAULTS
        # 0 or -1 are values to refuse now, not "the default": every point would fail later
        if train_steps is not None:
            positive_int("train_steps", train_steps, str(defaults["train_steps"]))
        if budget_s is not None:
            positive_float("budget_s", budget_s, str(defaults["budget_s"]))
        if lr is not None:
            positive_float("lr", lr, "1e-3")
        self.task = None
        if make_model is not None or make_batch is not None:
            if make_model is None or make_batch is None:
                raise ValueError("your own model needs both make_model= and make_batch=")
            self.task = custom_task(make_model, make_batch, loss_fn, accuracy_fn)
            check_task(self.task, device)
        precisions = precisions_for(device)
        params = {
            "model": Fixed(CUSTOM) if self.task else Choice(MODELS, default=model),
            "size": Fixed(CUSTOM) if self.task else
            Choice(SIZES, default=size or default_size(device)),
            "batch_size": Range(1, 1024 if on_cpu else 65536, default=32 if on_cpu else 64,
                                scale="pow2"),
            "accum_steps": Range(1, 64, default=1, scale="pow2"),
            "precision": Choice(tuple(precisions), default="fp32" if on_cpu else "bf16"),
            "optimizer": Choice(OPTIMIZERS, default="adamw"),
            "checkpointing": Choice((False, True)),
            "compile": Choice(COMPILE_MODES, default="off"),  # a CPU's first compile: ~30 s
            "optimizer_impl": Choice(OPTIMIZER_IMPLS, default="default"),
            "attention": Choice(ATTENTION_BACKENDS, default="default"),
            "channels_last": Choice((False, True)),
        }
        workload = functools.partial(train_point, task=self.task,
                                     train_steps=train_steps or defaults["train_steps"],
                                     budget_s=budget_s or defaults["budget_s"], lr=lr)
        self.max_batch_result: MaxBatchResult | None = None
        self.max_batch_figure = None
        self._finder: threading.Thread | None = None
        self._job: threading.Thread | None = None  # a profile or a tuning run
        self.profiles: list = []                    # ProfileReports, oldest first
        self.tune_outcome = None                    # the last TuneOutcome
        super().__init__(workload, params, sweep=sweep, name="train", device=device,
                         cpu_threads=cpu_threads, title=title, recorded_dir=recorded_dir,
                         out=out)

    # ---- layout ---------------------------------------------------------------------------
    def _extra_widgets(self) -> dict[str, list]:
        on_cpu = self.device == "cpu"
        self.target_batch = widgets.BoundedIntText(
            value=0, min=0, max=2**24, description="target batch",
            tooltip="an effective batch to split into micro-batch x accumulation (0: none)")
        default_mib = default_limit_bytes(self.device) // MIB if on_cpu else 0
        self.limit_mib = widgets.BoundedIntText(
            value=default_mib, min=0, max=2**24, description="limit (MiB)",
            tooltip="the memory to fit in; 0 on a GPU: what is free now")
        self.margin = widgets.BoundedFloatText(value=DEFAULT_MARGIN, min=0.0, max=0.9,
                                               step=0.05, description="margin")
        self.find_button = widgets.Button(description="Find max batch", icon="search",
                                          tooltip="the largest micro-batch that fits, at the "
                                                  "other controls' values")
        self.find_button.on_click(lambda _: self.find_max_batch())
        self.max_batch_text = widgets.HTML("")
        self.max_batch_plot = widgets.Image(format="png", layout=widgets.Layout(display="none"))
        note = ("CPU fallback: the search fits a pretend limit with tensor bytes counted "
                "exactly; on a GPU it fits the real memory." if on_cpu else
                "The search runs full optimizer steps, the first included, at each trial.")
        sizes = "" if self.task else "<br>" + html.escape("; ".join(
            f"{m}: " + ", ".join(f"{s} {n}" for s, n in by_size.items())
            for m, by_size in describe_sizes().items()))
        for box in (self.target_batch, self.limit_mib, self.margin):
            box.layout.width = "auto"
        whole(self.target_batch, self.limit_mib, self.margin, self.find_button)
        finder = widgets.VBox([
            widgets.HTML(f"<small>{html.escape(note)}{sizes}</small>"),
            widgets.HBox([self.target_batch, self.limit_mib, self.margin, self.find_button]),
            self.max_batch_text, self.max_batch_plot])
        self.profile_box = ProfileBox(on_profile=lambda: self.profile())
        self.tune_box = TuneBox(on_tune=lambda: self.tune())
        return {"sections": [("Max batch", finder), ("Tune", self.tune_box.widget),
                             ("Profile", self.profile_box.widget)]}

    # ---- the max-batch search --------------------------------------------------------------
    @property
    def running(self) -> bool:
        finder = self._finder is not None and self._finder.is_alive()
        job = self._job is not None and self._job.is_alive()
        return super().running or finder or job

    def find_max_batch(self, wait: bool = False, *, target_batch: int | None = None,
                       limit_mib: float | None = None, margin: float | None = None,
                       **values) -> bool:
        """The largest micro-batch at the controls' values (keyword values override them, as
        in run()); `target_batch` also plans it as micro-batch x accumulation. Returns False,
        with the reason in the status line, if it cannot start. The result lands in
        `max_batch_result` and is drawn in the Max batch tab."""
        with self._lock:
            if self.running:
                self.status.say("A run is in progress: press Stop or wait for it.", "warn")
                return False
            try:
                spec, limit, target, margin = self._finder_plan(values, target_batch,
                                                                limit_mib, margin)
            except Exception as exc:  # any bad value: say so, start nothing
                self.status.say(f"Cannot search: {exc}", "error")
                return False
            self._cancel, self._stopped_at = CancelToken(), None
            show_section(self.tabs, "Max batch")
            self._finder = threading.Thread(target=self._search, args=(spec, limit, target,
                                                                       margin),
                                            daemon=True, name="a800lab-max-batch")
            self.run_button.disabled = self.find_button.disabled = True
            self.stop_button.disabled = False
            self.status.say(f"Searching the largest micro-batch of {spec.model} "
                            f"({spec.precision}, {spec.optimizer}, checkpointing "
                            f"{'on' if spec.checkpointing else 'off'}) on "
                            f"{self._conditions()} ...")
            self._finder.start()
        if wait:
            self._finder.join()
        return True

    def _finder_plan(self, values: dict, target_batch, limit_mib, margin):
        spec = replace(self._chosen_spec(values), batch_size=1)
        if target_batch is not None:  # the box's 0 means "no plan"; an argument of 0 is wrong
            positive_int("target_batch", target_batch, "1024 (or None for no plan)")
        target = self.target_batch.value if target_batch is None else target_batch
        limit_mib = self.limit_mib.value if limit_mib is None else limit_mib
        if limit_mib < 0:
            raise ValueError(f"limit_mib={limit_mib} must be >= 0 (0: the device's free memory)")
        limit = int(limit_mib * MIB) or None
        if limit is None and self.device == "cpu":
            raise ValueError("on a CPU give a limit in MiB (a pretend card size), e.g. 256")
        margin = self.margin.value if margin is None else margin
        return spec, limit, target or None, margin

    def _search(self, spec: TrainSpec, limit, target, margin) -> None:
        trials: list = []

        def progress(trial):
            trials.append(trial)
            runs = sum(t.outcome != "skipped" for t in trials)
            self.progress_text.value = (f"{len(trials)} trials ({runs} run), last: {trial.stage} "
                                        f"{trial.batch_size} {trial.outcome}")

        try:
            with thread_count(self.torch_threads):
                result = find_max_batch_for(spec, self.task, device=self.device,
                                            limit_bytes=limit, margin=margin,
                                            target_batch=target, on_trial=progress,
                                            cancel=self._cancel)
            self.max_batch_result = result
            self._draw_search(result)
            self.status.say(result.summary(), "ok" if result.batch_size else "warn")
        except Cancelled:
            self.status.say(f"Max-batch search stopped after {len(trials)} trials.",
                            "warn")
        except BaseException as exc:  # noqa: B036 -- whatever ends it, say so and recover
            self.status.say(f"Max-batch search failed: {type(exc).__name__}: {exc}", "error")
        finally:
            self.run_button.disabled = self.find_button.disabled = False
            self.stop_button.disabled = True

    def stop(self) -> None:
        """End the run after the point in flight, or the search after the trial in flight."""
        if self._job is not None and self._job.is_alive():
            self._cancel.cancel()
            self.status.say("Stopping after the step in flight ...", "warn")
            return
        if self._finder is not None and self._finder.is_alive():
            self._cancel.cancel()
            self.status.say("Stopping the search after the trial in flight ...", "warn")
            return
        super().stop()

    def _draw_search(self, result: MaxBatchResult) -> None:
        with harness_work():
            figure = max_batch_figure(result)
            buf = io.BytesIO()
            figure.savefig(buf, format="png", dpi=90)
        self.max_batch_figure = figure
        self.max_batch_plot.value = buf.getvalue()
        self.max_batch_plot.layout.display = None
        plan = result.plan
        rows = [("largest micro-batch", result.batch_size),
                ("limit / budget", f"{format_bytes(result.limit_bytes)} / "
                                   f"{format_bytes(result.budget_bytes)}"),
                ("predicted at the answer", "-" if result.predicted_bytes is None
                 else format_bytes(result.predicted_bytes)),
                ("measured at the answer", "-" if result.measured_bytes is None
                 else format_bytes(result.measured_bytes)),
                ("trials run / skipped", f"{result.runs} / {len(result.trials) - result.runs}")]
        if plan is not None:
            rows.append((f"target {plan.target_batch}",
                         f"{plan.batch_size} x {plan.accum_steps} accumulation steps"
                         + (f" ({plan.note})" if plan.note else "")))
            if plan.warning:
                rows.append(("! warning", plan.warning))
        self.max_batch_text.value = "<table>" + "".join(
            f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>"
            for k, v in rows) + "</table>"

    # ---- the profile and the tuner ---------------------------------------------------------
    def profile(self, wait: bool = False, *, steps: int | None = None, **values) -> bool:
        """Profile the step at the controls' values (keyword values override them):
        profile_step's report lands in `profiles` and is drawn beside the earlier ones.
        Returns False, with the reason in the status line, if it cannot start."""
        try:
            spec = self._chosen_spec(values)
        except Exception as exc:  # any bad value: say so, start nothing
            self.status.say(f"Cannot profile: {exc}", "error")
            return False
        self._show_plan({}, self._chosen(values))  # the controls show what is profiled

        def work():
            count = self.profile_box.steps.value if steps is None else steps
            self.status.say(f"Profiling {count} steps of {spec.model} (micro-batch "
                            f"{spec.batch_size}) on {self._conditions()} ...")
            report = profile_step(spec, self.task, device=self.device, steps=count,
                                  cancel=self._cancel)
            self.profiles.append(report)
            self.profile_box.show(self.profiles)
            self.status.say(f"Profiled: {report.verdict}", "ok")

        return self._start_job("Profile", work, wait)

    def tune(self, wait: bool = False, *, target_batch: int | None = None,
             axes: dict | None = None, limit_mib: float | None = None,
             margin: float | None = None, budget_s: float | None = None,
             force: bool = False, store=None, **values) -> bool:
        """Tune the training config for `target_batch` (default: the target batch box) with
        tune_train over `axes` (default: its own); the model, optimizer and lr are the
        controls'. The outcome lands in `tune_outcome` and is drawn in the Tune tab."""
        try:
            spec, limit, target, chosen_margin = self._finder_plan(values, target_batch,
                                                                   limit_mib, margin)
            if not target:
                raise ValueError("give a target batch (the effective batch to tune for), "
                                 "e.g. 256")
        except Exception as exc:  # any bad value: say so, start nothing
            self.status.say(f"Cannot tune: {exc}", "error")
            return False

        trials: list = []

        def work():
            self.status.say(f"Tuning {spec.model} for an effective batch of {target} on "
                            f"{self._conditions()} ...")
            outcome = tune_train(
                self.task, model=spec.model, size=spec.size, target_batch=target, axes=axes,
                optimizer=spec.optimizer, lr=spec.lr, device=self.device, limit_bytes=limit,
                margin=chosen_margin, force=force, store=store, cancel=self._cancel,
                budget_s=self.tune_box.budget_s.value if budget_s is None else budget_s,
                on_stage=lambda text: setattr(self.progress_text, "value", text),
                on_trial=lambda r: setattr(self.progress_text, "value",
                                           trial_text(r, len(trials) + 1)) or trials.append(r))
            self.tune_outcome = outcome
            if self._cancel.cancelled:
                self.status.say("Tuning stopped; nothing stored.", "warn")
                return
            if not outcome.entry:
                self.status.say(f"Tuning found nothing: {outcome.summary()}", "warn")
                return
            self.tune_box.show(outcome)
            e = outcome.entry
            self.status.say(f"Tuned: {describe_candidate(e['best'])}, {e['samples_per_s']:.4g} "
                            f"samples/s; {noise_clause(e)}.",
                            "ok" if noise_clause(e) == "clear of the noise" else "warn")

        return self._start_job("Tune", work, wait)

    def _start_job(self, name: str, work, wait: bool = False) -> bool:
        """Run `work()` on the panel's job thread (one run of anything at a time)."""
        with self._lock:
            if self.running:
                self.status.say("A run is in progress: press Stop or wait for it.", "warn")
                return False
            self._cancel, self._stopped_at = CancelToken(), None
            show_section(self.tabs, name)
            self._job = threading.Thread(target=self._job_body, args=(name.lower(), work),
                                         daemon=True, name=f"a800lab-{name.lower()}")
            self._set_buttons(busy=True)
            self._job.start()
        if wait:
            self._job.join()
        return True

    def _job_body(self, name: str, work) -> None:
        try:
            with thread_count(self.torch_threads):
                work()
        except Cancelled:
            self.status.say(f"The {name} was stopped; nothing kept from it.", "warn")
        except BaseException as exc:  # noqa: B036 -- whatever ends it, say so and recover
            self.status.say(f"Cannot {name}: {type(exc).__name__}: {exc}", "error")
        finally:
            self._set_buttons(busy=False)

    def _set_buttons(self, *, busy: bool) -> None:
        for button in (self.run_button, self.find_button, self.profile_box.button,
                       self.tune_box.button):
            button.disabled = busy
        self.stop_button.disabled = not busy

    def _chosen(self, values: dict) -> dict:
        """Each parameter at its control's value, `values` overriding them (checked)."""
        unknown = set(values) - set(self.params)
        if unknown:
            raise ValueError(f"unknown parameter(s) {sorted(unknown)}; this panel has "
                             f"{list(self.params)}")
        return {key: self._check_one(key, values.get(key, spec.value if isinstance(
            spec, Fixed) else self.controls[key].value)) for key, spec in self.params.items()}

    def _chosen_spec(self, values: dict) -> TrainSpec:
        """The TrainSpec at the controls' values, `values` overriding them."""
        chosen = self._chosen(values)
        if self.task:
            chosen["model"] = self.task.name
        return TrainSpec(**chosen, lr=self.workload.keywords["lr"])

    # ---- views ----------------------------------------------------------------------------
    def _figure(self, df: pd.DataFrame, x: str, series: str):
        return training_figure(df, x, series=series, earlier_runs=self.earlier_runs.value)

    def _figure_title(self, x: str) -> str:
        return (f"samples/s, memory breakdown (predicted and measured peaks) and loss curves "
                f"vs {x}")

    def _table_html(self, measured: pd.DataFrame) -> str:
        """The results table: samples/s, the step's peak beside the memory model's
        prediction, loss and accuracy first; the rest behind its toggle."""
        if measured.empty:
            return ""
        numbers = run_numbers(measured["run_id"]) if "run_id" in measured else {}
        table = table_html(measured, list(self.params), numbers, measured=_MEASURED,
                           more=_MORE)
        mfu = [c for c in ("mfu_pct_of_datasheet_peak", "mfu_pct_of_measured_peak")
               if c in measured and measured[c].notna().any()]
        if "achieved_tflops" in measured and not mfu:
            table += ("<small>MFU: no peak known for this device (a CPU or a card the "
                      "datasheet table lacks, and no measured peak recorded): "
                      "<code>python -m a800lab peak</code> records one.</small>")
        return table
