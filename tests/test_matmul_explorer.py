"""MatmulExplorer driven headless on CPU: the tile heatmap and its best config, the shape sweep
with the quantisation model, the precision table, and what it refuses."""

import numpy as np
import pytest

from a800lab.widgets import MatmulExplorer
from a800lab.workloads.tiles.quantisation import quantise

SMALL = {"size": 64}


@pytest.fixture(scope="module")
def measured():
    """One panel, all three views run once (CPU stand-in, 64^3: a few seconds)."""
    panel = MatmulExplorer(**SMALL)
    assert panel.run(wait=True, view="tiles", block_m=[16, 32, 64], block_n=[16, 64]), \
        panel.status_text
    heatmap = panel.figure
    best = panel.best_config()
    best_text = panel.best.value
    assert panel.run(wait=True, view="shape", n=[48, 64, 65, 128]), panel.status_text
    shape = panel.figure
    assert panel.run(wait=True, view="precision"), panel.status_text
    return panel, heatmap, best, best_text, shape


def test_controls_fit_the_device():
    panel = MatmulExplorer(**SMALL)
    assert panel.device == "cpu" and panel.default_backend == "cpu_blocked"
    assert "num_warps" not in panel.controls  # the CPU stand-in has no warps or stages
    assert list(panel.params["precision"].values) == ["fp32", "fp16", "bf16"]  # no tf32/fp8
    assert panel.sweep_axis.value == "block_m" and panel.controls["block_n"].disabled
    assert "CPU stand-in" in panel.hints.value


def test_tile_heatmap_is_a_grid_of_every_config(measured):
    panel, heatmap, _, _, _ = measured
    tiles = panel.results[panel.results["workload"] == "tiles"].dropna(subset=["block_n"])
    first_run = tiles[tiles["run_id"] == tiles["run_id"].min()]
    assert sorted(zip(first_run["block_m"], first_run["block_n"], strict=True)) == [
        (16, 16), (16, 64), (32, 16), (32, 64), (64, 16), (64, 64)]
    ax = heatmap.axes[0]
    grid = np.ma.filled(ax.images[0].get_array().astype(float), np.nan)
    assert grid.shape == (2, 3) and np.isfinite(grid).all()
    assert "at m=64, n=64, k=64, precision=fp32, backend=cpu_blocked" in ax.get_title()
    assert heatmap.get_suptitle().startswith("CPU: ")  # the device is named


def test_best_config_is_the_fastest_cell(measured):
    panel, heatmap, (config, text), best_text, _ = measured
    ok = panel.results
    first_run = ok[(ok["run_id"] == ok["run_id"].min())]
    fastest = first_run.sort_values("throughput").iloc[-1]
    assert config == {"block_m": int(fastest["block_m"]), "block_n": int(fastest["block_n"]),
                      "block_k": int(fastest["block_k"]), "group_m": int(fastest["group_m"])}
    assert "not a Triton config" in text  # a CPU stand-in tile exports no triton.Config
    assert "best tile" in best_text
    (outline,) = [p for p in heatmap.axes[0].patches if p.get_gid() == "best"]
    columns = [t.get_text() for t in heatmap.axes[0].get_xticklabels()]
    assert columns[int(outline.get_x() + 0.5)] == str(config["block_m"])


def test_shape_sweep_draws_the_model_beside_the_measurement(measured):
    panel, _, _, _, shape = measured
    top, bottom = shape.axes[0], shape.axes[1]
    (predicted,) = [ln for ln in bottom.get_lines() if ln.get_gid() == "predicted"]
    x, y = predicted.get_xdata(), predicted.get_ydata()
    assert list(x) == [48, 64, 65, 128]
    shape_run = panel.results[panel.results["n"] == 65].iloc[-1]
    tile = [int(shape_run[f]) for f in ("block_m", "block_n", "block_k")]
    # one tile at a time (the CPU stand-in: SM count 1, no waves): tile quantisation only
    expected = [100 * quantise(64, n, 64, *tile, sm_count=1).predicted_efficiency
                for n in (48, 64, 65, 128)]
    np.testing.assert_allclose(y, expected)
    assert "CPU stand-in, one tile at a time, 1 SM, tile" in predicted.get_label()
    assert "throughput vs n" in top.get_title()


def test_precision_table_lists_every_precision(measured):
    panel = measured[0]
    table = panel.table.value
    for column in ("TFLOP/s", "% of datasheet peak", "error vs float64", "operands (MiB)"):
        assert column in table
    for precision in ("fp32", "fp16", "bf16"):
        assert f"<td>{precision}</td>" in table


def test_refusals_land_in_the_status_line():
    panel = MatmulExplorer(**SMALL)
    panel.controls["backend"].value = "torch"
    assert not panel.run(wait=True, view="tiles")
    assert "picks its own tiles" in panel.status_text
    assert not panel.run(wait=True, view="roofline")
    assert "view='roofline'" in panel.status_text
    assert panel.run(wait=True, view="shape", n=[64])  # torch is fine outside the heatmap
    record = panel.records[-1]
    assert record.outcome == "ok" and "block_m" not in record.params  # no tile claimed


def test_shape_hints_follow_the_controls():
    panel = MatmulExplorer(**SMALL)
    assert "multiple of" not in panel.hints.value  # fp32: no TensorCore alignment
    panel.controls["precision"].value = "bf16"
    panel.controls["n"].value = 32
    assert "n=32: a multiple of 8 but not of 64; A100-class tiles fill whole at 64" in \
        panel.hints.value


def test_modelling_another_card_asks_the_compiler_about_the_tile():
    panel = MatmulExplorer(size=64, card="A800")
    assert panel.run(wait=True, view="shape", n=[48, 64], block_m=64, block_n=64,
                     block_k=64), panel.status_text
    (predicted,) = [line for line in panel.figure.axes[1].lines
                    if line.get_gid() == "predicted"]
    label = predicted.get_label()
    assert "A800 (model of that GPU)" in label and "108 SMs" in label
    # fp32 64x64x64 at the tile kernel's 4 warps and 3 stages fits an A800 several times over
    assert "blocks" in label and "refuses" not in label


def test_the_best_tile_is_never_one_larger_than_the_matrix():
    import pandas as pd

    panel = MatmulExplorer(**SMALL)
    base = dict(outcome="ok", run_id="r1", m=64, n=64, k=64, block_k=16, group_m=1,
                backend="cpu_blocked")
    df = pd.DataFrame([{**base, "block_m": 64, "block_n": 64, "throughput": 0.08},
                       {**base, "block_m": 128, "block_n": 64, "throughput": 0.09}])
    config, text = panel.best_config(df)
    assert config["block_m"] == 64 and "masked" not in text
    config, text = panel.best_config(df.iloc[1:])
    assert config["block_m"] == 128 and "masked: block_m=128 > m=64" in text


def test_the_heatmap_caption_names_no_other_runs_values(measured):
    """Back on the heatmap after the shape sweep, the caption said "these points ran at n=48,
    64, 65, 128": the shape run's values, not the heatmap's (its title names those)."""
    panel = measured[0]
    panel.view.value = "tiles"
    try:
        assert "tile heatmap" in panel.caption.value
        assert "these points ran at" not in panel.caption.value
        assert "at m=64, n=64, k=64" in panel.figure.axes[0].get_title()
    finally:
        panel.view.value = "precision"
