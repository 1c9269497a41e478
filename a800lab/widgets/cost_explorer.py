"""CostExplorer: run a workload steadily under the energy meter and see samples/s, energy per
sample and cost per million samples, configs side by side.

    panel = CostExplorer("train")                 # a training preset; "matmul": size^3 matmuls
    panel.run(wait=True, batch_size=[32, 256])    # each point: a steady metered run
    panel.price.value = 4.0                       # $ per GPU-hour: re-plots, nothing re-measured
    panel.comparison()                            # samples/s, J/sample, cost, each vs the first
    CostExplorer(make_step=my_make_step, params={"batch_size": [32, 256]})   # your own workload
"""

import functools
import html
from pathlib import Path

import ipywidgets as widgets
import pandas as pd

from ..core.backends import resolve_device
from ..core.knobs import knobs
from ..core.precision import unsupported_reason
from ..figures.cost import cost_figure
from ..workloads.matmul import default_sizes
from ..workloads.training.spec import TrainSpec
from ..workloads.usage import (
    CostSpec,
    compare_usage,
    custom_usage_point,
    matmul_usage_point,
    train_usage_point,
)
from .explorer import DATA_DIR, Explorer
from .explorer_text import TABLE_ROWS
from .params import Choice, check_signature, spec_params

WORKLOADS = ("matmul", "train")
# comparison columns as the table heads them
_HEADS = {"throughput": "rate", "j_per_sample": "J/sample", "energy_source": "energy from",
          "cost_per_million_usd": "$ per million", "energy_cost_per_million_usd":
          "electricity $ per million", "throughput_vs_first": "rate vs first",
          "j_per_sample_vs_first": "J vs first", "cost_per_million_usd_vs_first":
          "$ vs first", "cpu_ms_per_sample": "CPU ms/sample", "gpu_util_pct": "GPU util %",
          "power_w": "power W"}
_MATMUL_PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


def _custom_point(make_step, duration_s, *, device: str = "auto", cancel=None, **params):
    return custom_usage_point(make_step, params, device=device, duration_s=duration_s,
                              cancel=cancel)


class CostExplorer(Explorer):
    """Each point (workloads.usage) runs the step back to back under an EnergyMeter:
    samples/s, utilisation, power and energy; cost per million samples from the price per
    GPU-hour (times the GPUs the job holds) and per kWh. Changing a price re-plots at once.

    `workload`: "matmul" (a size^3 matmul per sample) or "train" (a training preset); or your
    own `make_step(**params)` returning (step, samples_per_step), with `params` as for
    Explorer. `duration_s`: each point's metered time (default 5 s on a GPU, 0.5 s on a CPU).
    """

    def __init__(self, workload: str = "matmul", *, make_step=None, params: dict | None = None,
                 sweep: str | None = None, price_per_gpu_hour_usd: float = 2.0, gpus: int = 1,
                 price_per_kwh_usd: float = 0.0, duration_s: float | None = None,
                 device: str = "auto", cpu_threads: int | None = None,
                 title: str = "Utilisation, energy and cost per sample",
                 recorded_dir: Path | str = DATA_DIR, out: str | None = None):
        device = resolve_device(device)
        on_cpu = device == "cpu"
        CostSpec(price_per_gpu_hour_usd, gpus, price_per_kwh_usd, duration_s)
        # a CPU run prices this machine, not a GPU it does not have
        self._priced = "machine" if on_cpu else "GPU"
        if make_step is not None:
            if not params:
                raise ValueError("your own workload needs params=, e.g. {'batch_size': [32, 256]}")
            check_signature(make_step, list(params))
            point, name = functools.partial(_custom_point, make_step, duration_s), "usage"
        elif workload == "matmul":
            precisions = [p for p in _MATMUL_PRECISIONS if not unsupported_reason(p, device)]
            sizes = default_sizes(device)
            params = {"size": Choice(tuple(sizes), default=sizes[-1]),
                      "precision": Choice(tuple(precisions[:1] if on_cpu else precisions))}
            point, name = functools.partial(matmul_usage_point, duration_s=duration_s), "matmul"
            sweep = sweep or "precision"
        elif workload == "train":
            params = spec_params(TrainSpec, device, ("model", "size", "batch_size", "precision"),
                                 initial={"batch_size": 32 if on_cpu else 256,
                                          "precision": "fp32" if on_cpu else "bf16"})
            point, name = functools.partial(train_usage_point, duration_s=duration_s), "train"
            sweep = sweep or "batch_size"
        else:
            raise ValueError(f"workload={workload!r}: use one of {WORKLOADS}, or give your own "
                             "make_step= and params=")
        super().__init__(point, params, sweep=sweep, name=f"{name}_usage", device=device,
                         cpu_threads=cpu_threads, title=title, recorded_dir=recorded_dir,
                         out=out, extras={"after_status": [self._prices_box(
                             price_per_gpu_hour_usd, gpus, price_per_kwh_usd)]})
        for control in (self.price, self.gpus, self.kwh_price):
            control.observe(lambda _: self._view_changed(), names="value")

    def _prices_box(self, price: float, gpus: int, kwh: float) -> widgets.VBox:
        what, declared = self._priced, knobs(CostSpec)
        hour, kwh_price = declared["price_per_gpu_hour_usd"], declared["price_per_kwh_usd"]
        self.price = widgets.BoundedFloatText(value=price, min=hour.lo, max=hour.hi, step=0.1,
                                              description=f"$ / {what}-hour",
                                              style={"description_width": "initial"})
        self.gpus = widgets.BoundedIntText(value=gpus, min=declared["gpus"].lo, max=65536,
                                           description=f"{what}s",
                                           tooltip=f"{what}s the job holds (each is paid for)")
        self.kwh_price = widgets.BoundedFloatText(
            value=kwh, min=kwh_price.lo, max=kwh_price.hi, step=0.01, description="$ / kWh",
            tooltip="electricity price; 0 leaves electricity out of the plot")
        return widgets.VBox([
            widgets.HTML("<b>Prices</b> <small>change them any time: the plot and the table "
                         "follow without measuring again</small>"),
            widgets.HBox([self.price, self.gpus, self.kwh_price])])

    def comparison(self) -> pd.DataFrame:
        """The ok points side by side at the current prices, each also as a ratio to the first."""
        frame = self.results
        return frame if frame.empty else self._compare(frame)

    def _compare(self, frame: pd.DataFrame) -> pd.DataFrame:
        return compare_usage(frame, self.price.value, params=list(self.params),
                             gpus=self.gpus.value, price_per_kwh_usd=self.kwh_price.value or None)

    def _figure(self, df: pd.DataFrame, x: str, series: str):
        return cost_figure(df, x, series=series, price_per_gpu_hour_usd=self.price.value,
                           gpus=self.gpus.value, price_per_kwh_usd=self.kwh_price.value,
                           earlier_runs=self.earlier_runs.value)

    def _figure_title(self, x: str) -> str:
        return (f"throughput, energy per sample and cost per million vs {x} at "
                f"${self.price.value:g} per {self._priced}-hour")

    def _table_html(self, measured: pd.DataFrame) -> str:
        """The newest ok points at the current prices, and the failed points' messages."""
        if measured.empty:
            return ""
        ok = measured[measured["outcome"] == "ok"].tail(TABLE_ROWS)
        parts = []
        if not ok.empty:
            table = self._compare(ok)
            numbers = self._run_numbers()
            table.insert(0, "run", [f"#{numbers.get(r, '?')}" for r in ok["run_id"]])
            parts.append(table.rename(columns=_HEADS).to_html(
                index=False, float_format=lambda v: f"{v:.4g}", na_rep="-",
                classes="a800lab-results", border=0))
            note = ok["energy_note"].iloc[-1] if "energy_note" in ok else ""
            parts.insert(0, f"<p><small><b>Energy</b> (newest point): {html.escape(str(note))}"
                            "</small></p>")
        failed = measured[measured["outcome"] != "ok"].tail(3)
        parts += [f"<p><small>{html.escape(str(outcome))}: {html.escape(str(message))}"
                  "</small></p>" for outcome, message in failed[["outcome", "message"]].values]
        return "".join(parts)
