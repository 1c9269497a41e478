"""MatmulExplorer: vary a matmul's tile, shape and precision, press Run, see why it is fast.

    panel = MatmulExplorer()          # the Triton tile kernel on a GPU, its CPU stand-in elsewhere
    panel.run(wait=True, view="tiles", block_m=[32, 64, 128], block_n=[32, 64, 128])
    panel.best_config()               # ({"block_m": 128, ...}, "triton.Config({...}, ...)")
    panel.run(wait=True, view="shape", n=[1536, 1537, 1600])      # with the quantisation model
    panel.run(wait=True, view="precision")                        # every precision the card has

Its records are those of `python -m a800lab sweep tiles` (workload "tiles").
"""

import html
from pathlib import Path

import ipywidgets as widgets
import pandas as pd
import torch

from ..core.backends import resolve_device
from ..core.knobs import knobs
from ..figures.sweep import throughput_and_memory_figure
from ..figures.tiles import heatmap_figure, shape_sweep_figure
from ..workloads.matmul import DEFAULT_TILES, TILE_FIELDS, MatmulSpec, cpu_slowdown_note
from ..workloads.tiles.config import alignment_hints, export_config, overhang
from ..workloads.tiles.facts import tile_facts
from ..workloads.tiles.point import default_tile_backend, tiled_matmul_point
from ..workloads.tiles.quantisation import sm_count_of
from .explorer import DATA_DIR, Explorer, View
from .params import spec_params

VIEWS = {
    "tiles": View("tile heatmap", "tile heatmap: TFLOP/s over block_m x block_n", "block_m"),
    "shape": View("shape sweep",
                  "shape sweep: TFLOP/s vs {x} over the tile and wave quantisation model"),
    "precision": View("precision table", "precision table: TFLOP/s and peak memory per "
                      "precision and back end", "precision"),
}
SHAPE_DIMS = ("m", "n", "k")


class MatmulExplorer(Explorer):
    """Three views of C = A @ B: a tile heatmap (the best tile exported as a
    `triton.Config(...)`), a shape sweep over the tile and wave quantisation model (of this GPU,
    or of the GPU `card` names, e.g. "A800"), and a precision table (TFLOP/s, % of peak, error
    against float64). `size`: the starting m = n = k (256 on a CPU, 4096 on a GPU).
    """

    def __init__(self, *, device: str = "auto", size: int | None = None,
                 card: str | None = None, cpu_threads: int | None = None,
                 title: str = "Matmul: tiles, shapes and precision",
                 recorded_dir: Path | str = DATA_DIR, out: str | None = None):
        device = resolve_device(device)
        on_cpu = device == "cpu"
        if card is not None:
            sm_count_of(card)  # an unknown card: refused now, not after measuring
        self.card = card
        self.default_backend = default_tile_backend(device)
        tiles = DEFAULT_TILES.get(self.default_backend, DEFAULT_TILES["triton"])
        size = knobs(MatmulSpec)["m"].check("size", size if size is not None else
                                            256 if on_cpu else 4096)
        shown = ("m", "n", "k", "precision", "backend", "block_m", "block_n", "block_k",
                 "group_m", *(("num_warps", "num_stages") if
                              "num_warps" in TILE_FIELDS[self.default_backend] else ()))
        params = spec_params(MatmulSpec, device, shown, initial={
            **tiles, "m": size, "n": size, "k": size, "precision": "fp32" if on_cpu else "bf16",
            "backend": self.default_backend})
        self.block_n_values = widgets.Text(description="block_n", value=", ".join(
            str(v) for v in params["block_n"].sweep_values()), placeholder="e.g. 32, 64, 128")
        self.hints = widgets.HTML("")
        self.best = widgets.HTML("")
        super().__init__(tiled_matmul_point, params, sweep="block_m", name="tiles",
                         device=device, cpu_threads=cpu_threads, title=title,
                         recorded_dir=recorded_dir, out=out, views=VIEWS,
                         extras={"after_controls": [self.hints, self.block_n_values],
                                 "after_plot": [self.best]})
        for key in ("m", "n", "k", "precision"):
            self.controls[key].observe(lambda _: self._show_hints(), names="value")

    def _on_view(self) -> None:
        super()._on_view()
        view = self.view.value
        if view == "shape" and self.sweep_axis.value not in SHAPE_DIMS:
            self.sweep_axis.value = "n"  # a shape axis the user chose stays
        self.block_n_values.layout.display = None if view == "tiles" else "none"
        if view == "tiles":
            self.controls["block_n"].disabled = True
        self._show_hints()

    def _show_hints(self) -> None:
        values = {key: self.controls[key].value for key in ("m", "n", "k", "precision")}
        hints = alignment_hints(values["m"], values["n"], values["k"], values["precision"])
        if self.device == "cpu":
            hints.append(cpu_slowdown_note(values["precision"]) or
                         "CPU fallback: the tile back end is a cache-blocked CPU stand-in (real "
                         "times of this CPU, not TensorCore behaviour)")
        self.hints.value = "".join(f"<div><small>{html.escape(h)}</small></div>"
                                   for h in hints if h)

    def _plan(self, overrides: dict) -> tuple[dict, dict]:
        """In the tiles view block_m and block_n may both be lists (the heatmap's axes)."""
        overrides = dict(overrides)
        tiles = self.view.value == "tiles"
        block_n = self._values_of(overrides, "block_n", self.block_n_values) if tiles else None
        axes, fixed = super()._plan(overrides)
        if tiles:
            fixed.pop("block_n", None)
            axes["block_n"] = block_n
        if fixed.get("backend", axes.get("backend", [None])[0]) == "torch":
            if tiles:
                raise ValueError("the torch back end (cuBLAS on a GPU, the CPU's BLAS here) "
                                 "picks its own tiles: choose backend "
                                 f"{self.default_backend!r} for the tile heatmap, or the shape "
                                 "or precision view")
            for field in TILE_FIELDS["triton"]:
                fixed.pop(field, None)  # not used: the records must not claim a tile
        return axes, fixed

    def _slice(self, df: pd.DataFrame, free: tuple[str, ...]) -> tuple[pd.DataFrame, dict]:
        """The points that share every setting but `free` with the newest point of the newest
        run that varied `free` (else the newest point), and those settings: one picture never
        mixes unrelated settings. cuBLAS points (backend "torch") match any tile."""
        ok = df[df["outcome"] == "ok"]
        pool = ok if not ok.empty else df
        anchor = pool.sort_values("timestamp")
        for _, run in sorted(pool.groupby("run_id"), key=lambda item: item[0], reverse=True):
            if any(key in run and run[key].nunique() > 1 for key in free):
                anchor = run.sort_values("timestamp")
                break
        newest = anchor.iloc[-1]
        untiled = df["backend"] == "torch" if "backend" in df else pd.Series(False, df.index)
        keep = pd.Series(True, index=df.index)
        fixed = {}
        for key in [*self.params, "label"]:
            if key in free or key not in df:
                continue
            value = newest[key]
            if pd.isna(value):
                keep &= df[key].isna()
            else:
                same = df[key] == value
                keep &= (same | untiled) if key in TILE_FIELDS["triton"] else same
                fixed[key] = value
        return df[keep], fixed

    def _figure(self, df: pd.DataFrame, x: str, series: str):
        view = self.view.value
        if view == "tiles" and {"block_m", "block_n"} <= set(df):
            shown, fixed = self._slice(df[df["block_n"].notna()], ("block_m", "block_n"))
            figure = heatmap_figure(shown, "block_m", "block_n")
            at = ", ".join(f"{k}={v}" for k, v in fixed.items() if k != "label")
            axes = figure.axes[0]
            axes.set_title(f"{axes.get_title()}\nat {at}", fontsize="small")
            config, source = self.best_config(shown)
            self.best.value = "" if config is None else (
                f"<div><b>best tile</b>: <code>{html.escape(str(config))}</code>"
                f"<br><small>{html.escape(source)}</small></div>")
            return figure
        self.best.value = ""
        if view == "shape" and x in SHAPE_DIMS:
            shown, _ = self._slice(df, (x,))
            tile, sm_count, card, blocks = self._model_inputs(shown)
            return shape_sweep_figure(shown, x, tile=tile, sm_count=sm_count, card=card,
                                      series=series, earlier_runs=self.earlier_runs.value,
                                      blocks_per_sm=blocks)
        return throughput_and_memory_figure(self._precision_rows(df), x, series="backend",
                                            earlier_runs=self.earlier_runs.value)

    def _precision_rows(self, df: pd.DataFrame) -> pd.DataFrame:
        """Per back end, the newest run that compared precisions at the shape and device of the
        newest such run (the newest points when none did)."""
        compared = [run for _, run in df.groupby("run_id") if run["precision"].nunique() > 1]
        if not compared:
            same, _ = self._slice(df, ("precision", "backend", *TILE_FIELDS["triton"]))
            return same[same["run_id"] == same.groupby("backend")["run_id"].transform("max")]
        compared.sort(key=lambda run: run["run_id"].iloc[0])
        newest = compared[-1].iloc[-1]
        keys = [k for k in ("m", "n", "k", "label") if k in df]
        matching = [run for run in compared if all((run[k] == newest[k]).all() for k in keys)]
        per_backend = {run["backend"].iloc[0]: run for run in matching}  # newest run wins
        return pd.concat(per_backend.values())

    def _caption_note(self, measured: pd.DataFrame, x: str) -> str:
        # the heatmap draws the newest run that varied the tile, not the newest run: its title
        # names every value it was taken at, so the caption adds nothing that could mislead
        return "" if self.view.value == "tiles" else super()._caption_note(measured, x)

    def _model_inputs(self, df: pd.DataFrame) -> tuple[tuple | None, int | None, str, int]:
        """(tile, SM count, card, blocks per SM) of the newest point for the quantisation model;
        blocks per SM as the compiler gives them (on this GPU, or for `card`)."""
        newest = df.sort_values("timestamp").iloc[-1]
        known = all(k in df and not pd.isna(newest[k]) for k in ("block_m", "block_n", "block_k"))
        tile = tuple(int(newest[k]) for k in ("block_m", "block_n", "block_k")) if known else None
        if self.card is not None:
            card = f"{self.card} (model of that GPU)"
            if tile is None:
                return tile, sm_count_of(self.card), card, 1
            # the Triton kernel with this tile on `card`; a CPU stand-in point has no warps or
            # stages: the kernel's defaults
            fields = {f: newest[f] for f in TILE_FIELDS["triton"]
                      if f in newest and not pd.isna(newest[f])}
            facts = tile_facts(MatmulSpec(int(newest["m"]), int(newest["n"]), int(newest["k"]),
                                          newest["precision"], "triton", **fields), self.card)
            if not facts.fits:
                card += f"; the compiler refuses this tile there: {facts.reason.split(':')[0]}"
            return tile, sm_count_of(self.card), card, max(1, facts.blocks_per_sm)
        if self.device == "cpu":
            return tile, 1, "CPU stand-in, one tile at a time", 1
        props = torch.cuda.get_device_properties(self.device)
        blocks = newest.get("blocks_per_sm")
        return tile, props.multi_processor_count, props.name, \
            int(blocks) if blocks is not None and not pd.isna(blocks) and blocks > 0 else 1

    def best_config(self, df: pd.DataFrame | None = None) -> tuple[dict | None, str]:
        """The fastest tile of the heatmap's newest run: (config dict, its `triton.Config(...)`
        line or why there is none)."""
        if df is None:
            measured = self.results
            if measured.empty or "block_n" not in measured:
                return None, "no tile points measured yet"
            df, _ = self._slice(measured[measured["block_n"].notna()], ("block_m", "block_n"))
        ok = df[df["outcome"] == "ok"]
        if ok.empty:
            return None, "no tile config ran correctly"
        newest = ok[ok["run_id"] == ok["run_id"].max()]
        over = newest.apply(lambda r: overhang(int(r["m"]), int(r["n"]), int(r["block_m"]),
                                               int(r["block_n"])), axis=1)
        fitting = newest[over == ""]  # a tile larger than the output is never crowned
        best = (fitting if not fitting.empty else newest).sort_values("throughput").iloc[-1]
        masked = "" if not fitting.empty else \
            f" (masked: {over[best.name]}; every tile measured overhangs the output)"
        backend = best["backend"]
        fields = [f for f in TILE_FIELDS[backend] if f in best and not pd.isna(best[f])]
        config = {f: int(best[f]) for f in fields}
        if backend != "triton":
            return config, (f"a {backend} tile, measured on the CPU stand-in: not a Triton "
                            f"config (tune on a GPU to export one){masked}")
        spec = MatmulSpec(int(best["m"]), int(best["n"]), int(best["k"]), best["precision"],
                          backend, **config)
        return config, export_config(spec)[1] + masked

    def _table_html(self, measured: pd.DataFrame) -> str:
        if self.view.value != "precision" or measured.empty:
            return super()._table_html(measured)
        newest = self._precision_rows(measured)
        columns = {"precision": "precision", "backend": "back end", "tflops": "TFLOP/s",
                   "pct_of_datasheet_peak": "% of datasheet peak",
                   "pct_of_measured_peak": "% of measured peak",
                   "rel_error": "error vs float64", "operand_bytes": "operands (MiB)",
                   "outcome": "outcome", "noisy": "noisy"}
        table = newest[[c for c in columns if c in newest]].copy()
        if "operand_bytes" in table:
            table["operand_bytes"] = table["operand_bytes"] / 2**20
        for column in ("pct_of_datasheet_peak", "pct_of_measured_peak"):
            if column in table:  # None: no datasheet row (a CPU), no `a800lab peak` record
                table[column] = pd.to_numeric(table[column])
        if "noisy" in table:
            table["noisy"] = table["noisy"].map({True: "noisy", False: ""})
        return table.rename(columns=columns).to_html(
            index=False, na_rep="-", float_format=lambda v: f"{v:.4g}",
            classes="a800lab-results")
