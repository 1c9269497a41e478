"""Tile search: successive halving finds the exhaustive best, refuses and records failures,
says when a lead is inside the noise, and keeps tuned configs per device, shape and grid."""

import itertools
import json

import pytest

from a800lab.core.search import SearchResult, Trial, config_key, search
from a800lab.core.store import TunedStore, grid_hash
from a800lab.core.timing import Timing

GRID = [{"block_m": bm, "block_n": bn, "num_warps": w}
        for bm, bn, w in itertools.product([16, 32, 64, 128, 256], [16, 32, 64, 128], [2, 4, 8])]


def true_ms(config):
    """A synthetic landscape: best at 128 x 64 with 4 warps, smooth around it."""
    return (1.0 + 0.3 * abs(config["block_m"].bit_length() - 8) +
            0.2 * abs(config["block_n"].bit_length() - 7) + 0.1 * abs(config["num_warps"] - 4))


def validate(config):
    if config["block_m"] * config["block_n"] > 128 * 128:
        raise ValueError(f"block_m * block_n = {config['block_m'] * config['block_n']} exceeds "
                         "the register budget")


def make_evaluate(spread=0.02, calls=None):
    def evaluate(config, budget_s, first=True):
        if calls is not None:
            calls.append((config_key(config), budget_s, first))
        base = true_ms(config)
        samples = tuple(base * (1 + spread * ((i * 7919) % 11 - 5) / 5) for i in range(9))
        return {"throughput": 1.0 / base, "timing": Timing(samples, 1, "cpu")}
    return evaluate


def exhaustive_best():
    valid = [c for c in GRID if c["block_m"] * c["block_n"] <= 128 * 128]
    return min(valid, key=true_ms)


def test_finds_the_exhaustive_best_with_less_budget():
    calls = []
    result = search(GRID, validate, make_evaluate(calls=calls), budget_s=0.3)
    assert result.best == exhaustive_best()
    assert len(result.refused) == sum(c["block_m"] * c["block_n"] > 128 * 128 for c in GRID)
    assert "exceeds the register budget" in next(iter(result.refused.values()))
    spent = sum(budget for _, budget, _ in calls)
    exhaustive = 0.3 * (len(GRID) - len(result.refused))
    assert spent <= exhaustive / 3  # the halving's whole point
    assert max(budget for _, budget, _ in calls) == 0.3  # the last round at the full budget
    assert all(config_key(c) not in {k for k, _, _ in calls} for c in GRID
               if config_key(c) in result.refused)  # refused configs never ran
    firsts = [k for k, _, first in calls if first]
    assert len(firsts) == len(set(firsts)) == len({k for k, _, _ in calls})  # checked once


def test_a_lead_outside_the_noise_is_called_a_lead():
    result = search(GRID, validate, make_evaluate(spread=0.01), budget_s=0.3)
    assert result.inside_noise is False and result.lead > 0.05
    assert "leads" in result.verdict and "outside the noise" in result.verdict


def test_a_lead_inside_the_noise_is_said_to_be_one():
    twins = [{"block_m": 64, "block_n": 64}, {"block_m": 64, "block_n": 128}]

    def evaluate(config, budget_s, first):  # 1% apart, 20% spread: a coin toss
        base = 1.0 if config["block_n"] == 64 else 1.01
        return {"timing": Timing((0.8 * base, 0.9 * base, base, 1.1 * base, 1.2 * base), 1,
                                 "cpu"), "throughput": 1.0}

    result = search(twins, lambda c: None, evaluate, budget_s=0.1)
    assert result.best == twins[0] and result.inside_noise is True
    assert result.rivals == [twins[1]]
    assert "within the noise of 1 other config" in result.verdict
    assert "any of them may win a re-run" in result.verdict


def test_a_contended_cpu_ranks_nothing():
    """A lead measured while other work took the cores is never 'outside the noise', however
    large (7675% was printed once under a busy loop)."""
    def evaluate(config, budget_s, first):
        base = 1.0 if config["block_m"] == 64 else 77.0  # a huge, tight "lead"
        noise = {"noisy": True, "contended": True, "reasons": [
            "oversubscribed: 1 torch thread(s) + 1.8 cores busy in other processes > 2 cores"]}
        return {"timing": Timing((base,) * 5, 1, "cpu"), "noise": noise}

    result = search([{"block_m": 64}, {"block_m": 128}], lambda c: None, evaluate,
                    budget_s=0.1)
    assert result.best == {"block_m": 64} and result.inside_noise is True
    assert result.contended.startswith("oversubscribed")
    assert "outside the noise" not in result.verdict and "run again on a quiet machine" in \
        result.verdict


def test_a_config_inside_the_noise_of_the_cut_is_kept():
    # 9 configs: round 0 keeps ceil(9/4) = 3 by median; a 4th whose middle half overlaps the
    # 3rd's survives too, one far slower does not
    medians = [1.0, 1.1, 1.2, 1.22, 3.0, 3.1, 3.2, 3.3, 3.4]
    configs = [{"i": i} for i in range(len(medians))]
    rounds = {}

    def evaluate(config, budget_s, first):
        rounds.setdefault(budget_s, []).append(config["i"])
        m = medians[config["i"]]
        return {"timing": Timing((0.95 * m, 0.98 * m, m, 1.02 * m, 1.05 * m), 1, "cpu")}

    search(configs, lambda c: None, evaluate, budget_s=1.6)
    assert sorted(rounds[0.1]) == list(range(9)) and sorted(rounds[0.4]) == [0, 1, 2, 3]


def test_wrong_failing_and_oom_configs_are_recorded_not_ranked():
    import torch

    def evaluate(config, budget_s, first):
        if config["block_m"] == 16:
            return {"outcome": "wrong", "message": "relative error 0.9 vs float64"}
        if config["block_m"] == 32:
            raise torch.OutOfMemoryError("CUDA out of memory")
        if config["block_m"] == 64:
            raise RuntimeError("triton compile error")
        return make_evaluate()(config, budget_s)

    result = search(GRID, validate, evaluate, budget_s=0.2)
    failures = list(result.failed.values())
    assert any(f.startswith("wrong: relative error") for f in failures)
    assert any(f.startswith("oom:") for f in failures)
    assert any(f.startswith("error: RuntimeError") for f in failures)
    assert result.best["block_m"] in (128, 256)


def test_nothing_valid_says_why():
    result = search([{"block_m": 512, "block_n": 512, "num_warps": 4}], validate,
                    make_evaluate(), budget_s=0.1)
    assert result.best is None and result.verdict.startswith("no config ran correctly: ")
    with pytest.raises(ValueError, match="budget_s=0"):
        search(GRID, validate, make_evaluate(), budget_s=0)


def test_stop_keeps_what_was_measured():
    seen = []
    result = search(GRID, validate, make_evaluate(), budget_s=0.1,
                    on_trial=seen.append, should_stop=lambda: len(seen) >= 3)
    assert result.cancelled and len(result.trials) == 3


def test_a_stop_inside_a_trial_keeps_what_was_measured():
    """A cancel token raises Cancelled inside a trial (a panel's Stop): the search ends there,
    cancelled, with the trials before it, as a stop between trials does."""
    from a800lab.core.cancel import Cancelled

    evaluate, seen = make_evaluate(), []

    def stopped_at_the_fourth(config, budget_s, first=True):
        seen.append(config)
        if len(seen) == 4:
            raise Cancelled("stopped")
        return evaluate(config, budget_s, first)

    result = search(GRID, validate, stopped_at_the_fourth, budget_s=0.1)
    assert result.cancelled and len(result.trials) == 3 and not result.failed


def test_store_reuses_only_same_key_and_grid(tmp_path):
    store = TunedStore(tmp_path / "tuned.json")
    result = search(GRID, validate, make_evaluate(), budget_s=0.1)
    key = TunedStore.key(fingerprint="abc", m=4096, n=4096, k=4096, precision="bf16",
                         backend="triton")
    store.put(key, GRID, result, tflops=512.0)
    entry = TunedStore(tmp_path / "tuned.json").get(key, GRID)
    assert entry["best"] == result.best and entry["tflops"] == 512.0
    assert entry["grid_hash"] == grid_hash(list(reversed(GRID)))  # order does not matter
    assert store.get(key, GRID[:-1]) is None  # another grid: tune again
    other = TunedStore.key(fingerprint="xyz", m=4096, n=4096, k=4096, precision="bf16",
                           backend="triton")
    assert store.get(other, GRID) is None  # another device: tune again


def test_a_corrupt_store_is_named_and_never_overwritten(tmp_path):
    path = tmp_path / "tuned.json"
    path.write_text("{not json")
    store = TunedStore(path)
    with pytest.raises(ValueError, match="tuned.json is not a tuned-config store"):
        store.get("k", GRID)
    result = SearchResult(trials=[Trial({"block_m": 64}, 0, 0.1, Timing((1.0,), 1, "cpu"))])
    with pytest.raises(ValueError, match="move it away"):
        store.put("k", GRID, result)
    assert path.read_text() == "{not json"
    path.write_text(json.dumps([1, 2]))
    with pytest.raises(ValueError, match="not a JSON object"):
        store.get("k", GRID)
    path.write_text(json.dumps({"schema_version": 1}))
    with pytest.raises(ValueError, match="no 'entries' object"):
        store.get("k", GRID)
