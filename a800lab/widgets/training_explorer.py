"""TrainingExplorer: vary a training step's batch, accumulation, precision and levers, press
Run, see samples/s, where the memory goes, and whether it still learns.

    panel = TrainingExplorer()                          # preset models on generated data
    panel.run(wait=True, batch_size=[8, 32, 128], precision="bf16")
    panel.find_max_batch(wait=True, target_batch=1024)  # also profile() and tune(): the buttons
    TrainingExplorer(make_model=my_model, make_batch=my_batch, loss_fn=my_loss)   # your model
    TrainingExplorer(user_model="my_model.py")          # or its file, as --user-model takes it

Command-line twins: `sweep train`, `max-batch`, `profile` and `tune train`.
"""

import functools
import html
from dataclasses import replace
from pathlib import Path

import ipywidgets as widgets
import pandas as pd

from ..core.backends import resolve_device
from ..core.checks import positive_float, positive_int
from ..core.knobs import knobs
from ..core.sweep import first_line, thread_count
from ..core.units import MIB
from ..figures.training import max_batch_figure, training_figure
from ..workloads.models.presets import describe_sizes
from ..workloads.models.task import CUSTOM, check_task
from ..workloads.models.user_model import panel_task
from ..workloads.training.max_batch import DEFAULT_MARGIN, default_limit_bytes, find_max_batch_for
from ..workloads.training.point import train_point
from ..workloads.training.profile import profile_step
from ..workloads.training.spec import TrainSpec
from ..workloads.training.tune import CLEAR, describe_candidate, noise_clause, tune_train
from .explorer import DATA_DIR, NO_SWEEP, Explorer
from .layout import show_section, whole
from .params import plan_run, spec_params
from .training_tools import ProfileBox, TuneBox, max_batch_rows, png, rows_table, trial_text

# per mode: optimizer steps trained per point (the loss curve), timing budget per point
CPU_DEFAULTS = {"train_steps": 20, "budget_s": 0.1}
GPU_DEFAULTS = {"train_steps": 50, "budget_s": 0.3}
# the results table: what was measured first (fits a notebook), the rest behind a toggle
_MEASURED = ("throughput", "step_peak_bytes", "predicted_peak_bytes", "eval_loss", "accuracy")
_MORE = ("effective_batch", "median_ms", "iqr_ms", "achieved_tflops",
         "mfu_pct_of_datasheet_peak", "mfu_pct_of_measured_peak", "skipped_steps", "compile_s",
         "recompiles")


class TrainingExplorer(Explorer):
    """Each point (workloads.training.point.train_point) trains a fresh model a few steps and
    times whole optimizer steps: samples/s above the memory breakdown and the loss curves. The
    max-batch search, the profile and the tuner run like a Run and draw in their own tabs.

    Your own model: `make_model()` -> nn.Module, `make_batch(batch_size)` -> (inputs, targets),
    `loss_fn(outputs, targets)`, `accuracy_fn`; or `user_model=` a .py file defining them (the
    command line's --user-model). Dry-run on a batch of 2 when the panel is built: a model that
    cannot run is said in the status line (file and fault, one line), and every button says it
    again. `train_steps`, `budget_s`: per point; `lr`: default the preset's (1e-3 for yours).
    """

    def __init__(self, *, make_model=None, make_batch=None, loss_fn=None, accuracy_fn=None,
                 user_model: str | None = None, model: str = "transformer",
                 size: str | None = None, device: str = "auto", sweep: str = "batch_size",
                 train_steps: int | None = None, budget_s: float | None = None,
                 lr: float | None = None, cpu_threads: int | None = None,
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
        TrainSpec(lr=lr)  # a bad lr: refused now by its field, not at every point
        self.task, fault = panel_task(user_model, make_model, make_batch, loss_fn, accuracy_fn,
                                      device=device, check=check_task)
        self._yours = yours = user_model is not None or make_model is not None
        params = spec_params(  # the fields but lr (an argument) and GradScaler's two
            TrainSpec, device, [f for f in knobs(TrainSpec) if f not in (
                "lr", "init_scale", "growth_interval")],  # a CPU's first compile: ~30 s
            fixed={"model": CUSTOM, "size": CUSTOM} if yours else {},
            initial={"model": model, "size": size, "precision": None if on_cpu else "bf16"})
        workload = functools.partial(train_point, task=self.task,
                                     train_steps=train_steps or defaults["train_steps"],
                                     budget_s=budget_s or defaults["budget_s"], lr=lr)
        self.max_batch_result = self.max_batch_figure = None
        self.profiles: list = []                    # ProfileReports, oldest first
        self.tune_outcome = None                    # the last TuneOutcome
        self.profile_box = ProfileBox(on_profile=lambda: self.profile())
        self.tune_box = TuneBox(on_tune=lambda: self.tune())
        sections = [("Max batch", self._finder(device)), ("Tune", self.tune_box.widget),
                    ("Profile", self.profile_box.widget)]
        super().__init__(workload, params, sweep=sweep, name="train", device=device,
                         cpu_threads=cpu_threads, title=title, recorded_dir=recorded_dir,
                         out=out, figure=training_figure,
                         figure_title="samples/s, memory breakdown (predicted and measured "
                                      "peaks) and loss curves vs {x}",
                         table_columns=(_MEASURED, _MORE), extras={"sections": sections})
        self.job.buttons += [self.find_button, self.profile_box.button, self.tune_box.button]
        self._refuse_every_run(fault)

    def _finder(self, device: str) -> widgets.VBox:  # the Max batch tab
        on_cpu = device == "cpu"
        self.target_batch = widgets.BoundedIntText(
            value=0, min=0, max=2**24, description="target batch",
            tooltip="an effective batch to split into micro-batch x accumulation (0: none)")
        self.limit_mib = widgets.BoundedIntText(
            value=default_limit_bytes(device) // MIB if on_cpu else 0, min=0, max=2**24,
            description="limit (MiB)", tooltip="the memory to fit in; 0 on a GPU: what is free now")
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
        sizes = "" if self._yours else "<br>" + html.escape("; ".join(
            f"{m}: " + ", ".join(f"{s} {n}" for s, n in by_size.items())
            for m, by_size in describe_sizes().items()))
        for box in (self.target_batch, self.limit_mib, self.margin):
            box.layout.width = "auto"
        whole(self.target_batch, self.limit_mib, self.margin, self.find_button)
        return widgets.VBox([
            widgets.HTML(f"<small>{html.escape(note)}{sizes}</small>"),
            widgets.HBox([self.target_batch, self.limit_mib, self.margin, self.find_button]),
            self.max_batch_text, self.max_batch_plot])

    def find_max_batch(self, wait: bool = False, *, target_batch: int | None = None,
                       limit_mib: float | None = None, margin: float | None = None,
                       **values) -> bool:
        """Find the largest micro-batch at the controls' values (overridden as in run());
        `target_batch` also plans micro-batch x accumulation. Into `max_batch_result`."""
        trials: list = []

        def plan():
            spec, limit, target, chosen_margin = self._finder_plan(values, target_batch,
                                                                   limit_mib, margin)
            show_section(self.tabs, "Max batch")
            self.status.say(f"Searching the largest micro-batch of {spec.model} "
                            f"({spec.precision}, {spec.optimizer}, checkpointing "
                            f"{'on' if spec.checkpointing else 'off'}) on "
                            f"{self._conditions()} ...")
            return lambda: self._search(spec, limit, target, chosen_margin, trials)

        return self.job.start(
            plan, cannot="Cannot search", name="a800lab-max-batch", wait=wait,
            stopping="Stopping the search after the trial in flight ...",
            stopped=lambda: f"Max-batch search stopped after {len(trials)} trials.",
            failed=lambda exc: f"Max-batch search failed: {type(exc).__name__}: {first_line(exc)}")

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
        return spec, limit, target or None, self.margin.value if margin is None else margin

    def _search(self, spec: TrainSpec, limit, target, margin, trials: list) -> None:
        def progress(trial):
            trials.append(trial)
            runs = sum(t.outcome != "skipped" for t in trials)
            self.progress_text.value = (f"{len(trials)} trials ({runs} run), last: {trial.stage} "
                                        f"{trial.batch_size} {trial.outcome}")

        with thread_count(self.torch_threads):
            result = find_max_batch_for(spec, self.task, device=self.device, limit_bytes=limit,
                                        margin=margin, target_batch=target, on_trial=progress,
                                        cancel=self.job.cancel)
        self.max_batch_result = result
        self.max_batch_figure = max_batch_figure(result)
        self.max_batch_plot.value = png(self.max_batch_figure)
        self.max_batch_plot.layout.display = None
        self.max_batch_text.value = rows_table(max_batch_rows(result))
        self.status.say(result.summary(), "ok" if result.batch_size else "warn")

    def profile(self, wait: bool = False, *, steps: int | None = None,
                memory: bool | None = None, **values) -> bool:
        """Profile the step at the controls' values (overridden as in run()) into `profiles`;
        `memory` (default: the tab's box): also one step's memory timeline by category."""
        def plan():
            spec = self._chosen_spec(values)
            self._show_plan({}, self._chosen(values))  # the controls show what is profiled
            return lambda: self._profile(spec, steps, memory)

        return self._start_job("Profile", plan, wait)

    def _profile(self, spec: TrainSpec, steps: int | None, memory: bool | None) -> None:
        count = self.profile_box.steps.value if steps is None else steps
        memory = self.profile_box.memory.value if memory is None else memory
        self.status.say(f"Profiling {count} steps of {spec.model} (micro-batch "
                        f"{spec.batch_size}) on {self._conditions()} ...")
        with thread_count(self.torch_threads):
            report = profile_step(spec, self.task, device=self.device, steps=count,
                                  memory=memory, cancel=self.job.cancel)
        self.profiles.append(report)
        self.profile_box.show(self.profiles)
        self.status.say(f"Profiled: {report.verdict}", "ok")

    def tune(self, wait: bool = False, *, target_batch: int | None = None,
             axes: dict | None = None, limit_mib: float | None = None,
             margin: float | None = None, budget_s: float | None = None,
             force: bool = False, store=None, **values) -> bool:
        """tune_train for `target_batch` (default: the target batch box) over `axes` (default:
        its own) into `tune_outcome`; the model, optimizer and lr are the controls'."""
        def plan():
            spec, limit, target, chosen_margin = self._finder_plan(values, target_batch,
                                                                   limit_mib, margin)
            if not target:
                raise ValueError("give a target batch (the effective batch to tune for), "
                                 "e.g. 256")
            budget = self.tune_box.budget_s.value if budget_s is None else budget_s
            return lambda: self._tune(spec, target, dict(
                axes=axes, limit_bytes=limit, margin=chosen_margin, force=force, store=store,
                budget_s=budget))

        return self._start_job("Tune", plan, wait)

    def _tune(self, spec: TrainSpec, target: int, options: dict) -> None:
        trials: list = []

        def trial(record) -> None:
            self.progress_text.value = trial_text(record, len(trials) + 1)
            trials.append(record)

        self.status.say(f"Tuning {spec.model} for an effective batch of {target} on "
                        f"{self._conditions()} ...")
        with thread_count(self.torch_threads):
            outcome = tune_train(
                self.task, model=spec.model, size=spec.size, target_batch=target,
                optimizer=spec.optimizer, lr=spec.lr, device=self.device,
                cancel=self.job.cancel, on_trial=trial,
                on_stage=lambda text: setattr(self.progress_text, "value", text), **options)
        self.tune_outcome = outcome
        if self.job.cancel.cancelled:
            self.status.say("Tuning stopped; nothing stored.", "warn")
            return
        if not outcome.entry:
            self.status.say(f"Tuning found nothing: {outcome.summary()}", "warn")
            return
        self.tune_box.show(outcome)
        e = outcome.entry
        self.status.say(f"Tuned: {describe_candidate(e['best'])}, {e['samples_per_s']:.4g} "
                        f"samples/s; {noise_clause(e)}.",
                        "ok" if noise_clause(e) == CLEAR else "warn")

    def _start_job(self, name: str, plan, wait: bool) -> bool:
        word = name.lower()

        def ready():
            work = plan()
            show_section(self.tabs, name)
            return work

        return self.job.start(
            ready, cannot=f"Cannot {word}", name=f"a800lab-{word}", wait=wait,
            stopping="Stopping after the step in flight ...",
            stopped=f"The {word} was stopped; nothing kept from it.",
            failed=lambda exc: f"Cannot {word}: {type(exc).__name__}: {first_line(exc)}")

    def _chosen(self, values: dict) -> dict:
        current = {key: control.value for key, control in self.controls.items()}
        first, fixed = plan_run(self.params, current, NO_SWEEP, "", values, no_sweep=NO_SWEEP)
        return {**fixed, **{key: point[0] for key, point in first.items()}}

    def _chosen_spec(self, values: dict) -> TrainSpec:
        chosen = self._chosen(values)
        if self.task:
            chosen["model"] = self.task.name
        return TrainSpec(**chosen, lr=self.workload.keywords["lr"])

    def _table_html(self, measured: pd.DataFrame) -> str:
        table = super()._table_html(measured)
        mfu = [c for c in ("mfu_pct_of_datasheet_peak", "mfu_pct_of_measured_peak")
               if c in measured and measured[c].notna().any()]
        if table and "achieved_tflops" in measured and not mfu:
            table += ("<small>MFU: no peak known for this device (a CPU or a card the "
                      "datasheet table lacks, and no measured peak recorded): "
                      "<code>python -m a800lab peak</code> records one.</small>")
        return table
