"""Tile and wave quantisation: hand-worked examples and brute-force counting."""

import itertools
import math

import numpy as np
import pytest

from a800lab.core.specs import all_specs
from a800lab.workloads.tiles.quantisation import quantise, sm_count_of


def test_nvidia_guide_wave_example_a100_1792_squared():
    # NVIDIA's matrix-multiplication guide, wave quantisation on an A100 (108 SMs, one
    # 256x128 thread-block tile per SM): a 1792 x 1792 output is 7 x 14 = 98 tiles, one wave in
    # which 10 of the 108 SMs have nothing to do.
    q = quantise(1792, 1792, 4096, 256, 128, 32, sm_count=108)
    assert (q.tiles_m, q.tiles_n, q.tiles, q.waves) == (7, 14, 98, 1)
    assert q.last_wave_occupancy == pytest.approx(98 / 108)
    assert q.tile_efficiency == 1.0 and q.predicted_efficiency == pytest.approx(0.907, abs=1e-3)


def test_one_more_column_costs_a_whole_wave():
    # M = 27648 = 108 x 256: every 128-wide column of tiles is exactly one full wave on an
    # A100. N = 1536 is 12 full waves; N = 1537 needs a 13th for its single extra column.
    even = quantise(27648, 1536, 4096, 256, 128, 64, sm_count_of("A100"))
    odd = quantise(27648, 1537, 4096, 256, 128, 64, sm_count_of("A100"))
    assert (even.waves, even.predicted_efficiency) == (12, 1.0)
    assert odd.waves == 13 and odd.wave_efficiency == 1.0
    assert odd.tile_efficiency == pytest.approx(1537 / (13 * 128))   # 0.924
    # Same per-wave time, one more wave: throughput drops by 1537 / 1536 * 12 / 13
    assert odd.predicted_efficiency / even.predicted_efficiency == pytest.approx(
        1537 / 1536 * 12 / 13)


def test_tile_quantisation_of_257_columns():
    # 257 columns in 128-wide tiles need 3 tile columns: a third of the work is padding.
    q = quantise(128, 257, 64, 128, 128, 64, sm_count=108)
    assert q.tiles == 3 and q.tile_efficiency == pytest.approx(257 / 384)


def test_k_padding_counts_as_wasted_work():
    q = quantise(128, 128, 33, 128, 128, 32, sm_count=1)
    assert q.k_steps == 2 and q.tile_efficiency == pytest.approx(33 / 64)


def test_blocks_per_sm_widen_the_wave():
    q = quantise(1024, 1024, 1024, 64, 64, 32, sm_count=108, blocks_per_sm=2)
    assert q.wave_size == 216 and q.tiles == 256 and q.waves == 2
    assert q.last_wave_occupancy == pytest.approx(40 / 216)


def _brute_force(m, n, k, bm, bn, bk, sms):
    """Count element by element: which output elements each tile covers, how many K slots it
    computes, and how many wave slots run."""
    covered = np.zeros((m, n), dtype=int)
    tiles = []
    for r0, c0 in itertools.product(range(0, m, bm), range(0, n, bn)):
        covered[r0:r0 + bm, c0:c0 + bn] += 1
        tiles.append((r0, c0))
    assert (covered == 1).all()  # every output element in exactly one tile
    k_slots = len(range(0, k, bk)) * bk
    slots_run = 0
    queue = list(tiles)
    while queue:  # one wave: each SM takes one tile
        queue = queue[sms:]
        slots_run += sms
    useful = m * n * k
    return useful / (len(tiles) * bm * bn * k_slots), len(tiles) / slots_run, slots_run // sms


@pytest.mark.parametrize("seed", range(25))
def test_against_brute_force_counting(seed):
    rng = np.random.default_rng(seed)
    m, n, k = (int(v) for v in rng.integers(1, 300, size=3))
    bm, bn, bk = (int(2 ** rng.integers(4, 8)) for _ in range(3))
    sms = int(rng.integers(1, 20))
    tile_eff, wave_eff, waves = _brute_force(m, n, k, bm, bn, bk, sms)
    q = quantise(m, n, k, bm, bn, bk, sms)
    assert q.tile_efficiency == pytest.approx(tile_eff)
    assert q.wave_efficiency == pytest.approx(wave_eff) and q.waves == waves
    assert q.predicted_efficiency == pytest.approx(tile_eff * wave_eff)
    assert 0 < q.predicted_efficiency <= 1


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="block_n=0 must be a positive int"):
        quantise(64, 64, 64, 64, 0, 32, 108)
    with pytest.raises(ValueError, match="sm_count=1.5"):
        quantise(64, 64, 64, 64, 64, 32, 1.5)
    assert quantise(np.int64(64), 64, 64, 64, 64, 32, 108).m == 64


def test_sm_counts_from_the_datasheet_table():
    assert sm_count_of("NVIDIA A800-SXM4-80GB") == 108 and sm_count_of("A800") == 108
    assert sm_count_of("NVIDIA H200") == 132
    with pytest.raises(ValueError, match="rows differ"):
        sm_count_of("H100")  # SXM 132, PCIe 114
    with pytest.raises(ValueError, match="does not know"):
        sm_count_of("Radeon")
    assert len(all_specs()) == len({s.name for s in all_specs()})
    assert math.isclose(quantise(8, 8, 8, 16, 16, 16, 1).to_dict()["predicted_efficiency"],
                        (8 * 8 * 8) / (16 ** 3))
