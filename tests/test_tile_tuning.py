"""tune(): the CPU stand-in tuned end to end, trials recorded, winners stored and reused."""

import pytest

from a800lab.core.results import read_records
from a800lab.core.store import TunedStore, tuned_store_path
from a800lab.workloads.tiles.tune import config_grid, default_grid, tune

GRID = config_grid({"block_m": [32, 128], "block_n": [32, 128], "block_k": [64],
                    "group_m": [1, 0]}, "cpu_blocked")  # group_m=0 is refused


def test_grids():
    assert len(GRID) == 8 and GRID[0] == {"block_m": 32, "block_n": 32, "block_k": 64,
                                          "group_m": 1}
    assert len(default_grid("cpu_blocked")) == 32 and len(default_grid("triton")) == 72
    with pytest.raises(ValueError, match=r"\['num_warps'\] are not tile fields of "
                                         r"backend='cpu_blocked'"):
        config_grid({"num_warps": [4]}, "cpu_blocked")
    with pytest.raises(ValueError, match="cuBLAS"):
        default_grid("torch")


def test_tune_records_every_trial_and_stores_the_winner(tmp_path, quiet_cpu):
    store, out = tmp_path / "tuned.json", tmp_path / "tune.jsonl"
    outcome = tune(128, 128, 128, "fp32", device="cpu", grid=GRID, budget_s=0.02, store=store,
                   out=out)
    search = outcome.search
    assert not outcome.reused and len(search.refused) == 4
    assert all("group_m=0" in why for why in search.refused.values())
    records = read_records(out)
    assert records and {r.workload for r in records} == {"tiles"}
    assert len({r.run_id for r in records}) == 1 and all(r.outcome == "ok" for r in records)
    assert {r.params["group_m"] for r in records} == {1}  # refused configs never ran
    assert outcome.entry["best"] == search.best and outcome.entry["tflops"] > 0
    assert outcome.entry["shape"] == {"m": 128, "n": 128, "k": 128, "precision": "fp32",
                                      "backend": "cpu_blocked"}
    budgets = sorted({r.metrics["budget_s"] for r in records})
    assert budgets[0] < budgets[-1] == 0.02  # short early rounds, full budget at the end
    checked = [r for r in records if r.metrics.get("rel_error") is not None]
    assert len(checked) == len({tuple(sorted(r.params.items())) for r in records})  # once each


def test_a_contended_winner_is_not_stored(tmp_path, monkeypatch):
    from a800lab.core import noise, sweep

    def busy(samples, conditions=None, *, on_cpu=False):
        verdict = noise.assess(samples)
        return {**verdict, "noisy": True, "contended": True, "reasons": [
            "oversubscribed: 1 torch thread(s) + 1.9 cores busy in other processes > 2 cores"]}

    monkeypatch.setattr(sweep, "assess", busy)
    store = tmp_path / "tuned.json"
    outcome = tune(64, 64, 64, "fp32", device="cpu", grid=GRID, budget_s=0.01, store=store)
    assert outcome.search.best is not None and outcome.entry == {}
    assert "contended" in outcome.search.verdict and "outside the noise" not in \
        outcome.search.verdict
    assert not store.exists()


def test_a_stored_winner_is_reused_until_the_grid_changes(tmp_path, quiet_cpu):
    store = tmp_path / "tuned.json"
    first = tune(64, 64, 64, "fp32", device="cpu", grid=GRID, budget_s=0.01, store=store)
    again = tune(64, 64, 64, "fp32", device="cpu", grid=GRID, budget_s=0.01, store=store)
    assert again.reused and again.search is None and again.entry["best"] == first.entry["best"]
    other_grid = tune(64, 64, 64, "fp32", device="cpu", grid=GRID[:2], budget_s=0.01,
                      store=store)
    assert not other_grid.reused
    other_shape = tune(64, 64, 32, "fp32", device="cpu", grid=GRID, budget_s=0.01, store=store)
    assert not other_shape.reused
    forced = tune(64, 64, 64, "fp32", device="cpu", grid=GRID, budget_s=0.01, store=store,
                  force=True)
    assert not forced.reused
    assert len(TunedStore(store)._read()) == 2  # two shapes; the later grid replaced the first


def test_the_tuned_store_path_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("A800LAB_TUNED", str(tmp_path / "mine.json"))
    assert tuned_store_path() == tmp_path / "mine.json"
    monkeypatch.delenv("A800LAB_TUNED")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert tuned_store_path() == tmp_path / "a800lab" / "tuned.json"
