"""The training-config tuner: its grid, every candidate's verification, the frontier, the store
and the code to paste."""

import pytest
import torch
from torch import nn

from a800lab.core.results import read_records
from a800lab.core.search import pareto_frontier
from a800lab.figures.tune import frontier_figure
from a800lab.workloads.models.presets import preset
from a800lab.workloads.models.task import custom_task
from a800lab.workloads.training.candidates import micro_batches
from a800lab.workloads.training.tune import (
    noise_clause,
    storing_clause,
    training_snippet,
    tune_train,
)

# another job's load on this shared machine must not decide what is stored (contention: below)
pytestmark = pytest.mark.usefixtures("one_torch_thread", "quiet_cpu")
SMALL = {"checkpointing": [False], "optimizer_impl": ["for-loop", "fused"]}


def few_layers():
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                         nn.Linear(32, 4))


def a_batch(n):
    x = torch.randn(n, 16)
    return x, x[:, :4].argmax(1)


def test_micro_batches_are_the_targets_divisors_up_to_the_bound():
    assert micro_batches(256, 100) == [64, 32, 16, 8]
    assert micro_batches(96, 1000) == [96, 48, 24, 12]
    assert micro_batches(7, 7) == [7, 1]
    assert micro_batches(64, 64, count=2) == [64, 32]


def test_the_frontier_keeps_what_nothing_beats_in_both():
    points = [{"samples_per_s": s, "peak_bytes": p, "name": n} for s, p, n in
              [(10, 100, "a"), (20, 200, "b"), (15, 300, "c"), (30, 300, "d"), (5, 50, "e")]]
    assert [c["name"] for c in pareto_frontier(points)] == ["e", "a", "b", "d"]


def test_tuning_a_users_model_finds_stores_and_reuses(tmp_path):
    store, out = tmp_path / "tuned.json", tmp_path / "trials.jsonl"
    task = custom_task(few_layers, a_batch)
    outcome = tune_train(task, target_batch=32, axes=SMALL, device="cpu", budget_s=0.05,
                         store=store, out=out)
    entry = outcome.entry
    assert not outcome.reused and entry["best"]["batch_size"] * \
        entry["best"]["accum_steps"] == 32
    assert entry["measured"] == 8 and entry["failed"] == 0  # 2 optimizers x 32, 16, 8, 4
    assert all(c["grad_gap"] <= 1e-3 for c in entry["candidates"])  # fp32 accumulation
    assert entry["frontier"] and entry["best"] in [c["config"] for c in entry["candidates"]]
    assert any(clause in outcome.summary() for clause in (
        "; within noise of", "; clear of the noise", "noisy (timing spread, or the CPU shared "
        "with other work): the ranking may not hold"))
    records = read_records(out)
    assert {r.workload for r in records} == {"tune-train"} and len(records) >= 8
    again = tune_train(task, target_batch=32, axes=SMALL, device="cpu", store=store)
    assert again.reused and again.winner == outcome.winner and again.search is None
    for drawn in (outcome, again):  # a reused entry draws the same picture
        figure = frontier_figure(drawn)
        assert {line.get_gid() for line in figure.axes[0].lines} >= {"candidate", "frontier",
                                                                      "winner"}


def test_the_snippet_runs_as_pasted():
    task = preset("mlp")
    generator = torch.Generator().manual_seed(0)
    loader = [task.make_batch(8, generator) for _ in range(4)]
    for config in ({"precision": "fp32", "batch_size": 8, "accum_steps": 2,
                    "checkpointing": True, "optimizer_impl": "fused"},
                   {"precision": "fp16", "batch_size": 8, "accum_steps": 2},
                   {"precision": "bf16_pure", "batch_size": 8, "accum_steps": 1}):
        code = training_snippet(config, optimizer="adamw", lr=1e-2, device="cpu")
        scope = {"make_model": task.make_model, "loss_fn": task.loss_fn, "loader": loader}
        exec(compile(code, "<snippet>", "exec"), scope)  # noqa: S102 - our own generated code
        assert scope["accum_steps"] == config["accum_steps"]
        assert ("GradScaler" in code) == (config["precision"] == "fp16")
    compiled = training_snippet({"precision": "bf16", "batch_size": 64, "accum_steps": 4,
                                 "compile": "max-autotune", "attention": "flash"},
                                optimizer="sgd", lr=0.1, device="cuda:0")
    assert 'torch.compile(model, mode="max-autotune")' in compiled
    assert "sdpa_kernel(SDPBackend.FLASH_ATTENTION)" in compiled
    assert 'torch.autocast(device, dtype=torch.bfloat16)' in compiled
    compile(compiled, "<snippet>", "exec")


def test_batch_norm_makes_accumulated_candidates_fail_verification(tmp_path):
    outcome = tune_train(model="cnn", target_batch=16, axes=SMALL, device="cpu",
                         budget_s=0.05, store=tmp_path / "t.json")
    failed = list(outcome.search.failed.values())
    assert failed and all("batch norm makes micro-batches differ" in f for f in failed)
    assert outcome.winner["accum_steps"] == 1  # only one batch of 16 is one batch of 16


def test_a_loss_that_sums_instead_of_averaging_is_caught(tmp_path):
    # accumulation divides each micro-batch's loss by accum_steps: a summed loss then gives
    # 1/k of the gradient of the whole batch summed
    task = custom_task(few_layers, a_batch,
                       loss_fn=lambda out, y: nn.functional.cross_entropy(out, y,
                                                                          reduction="sum"))
    outcome = tune_train(task, target_batch=16, axes={**SMALL, "optimizer_impl": ["fused"]},
                         device="cpu", budget_s=0.05, store=tmp_path / "t.json")
    assert any("gradient off" in f for f in outcome.search.failed.values())
    assert outcome.winner["accum_steps"] == 1


def test_a_small_memory_limit_bounds_the_micro_batch_and_refusals_say_why(tmp_path):
    outcome = tune_train(model="transformer", target_batch=32, device="cpu", budget_s=0.05,
                         axes={"checkpointing": [False], "optimizer_impl": ["fused"],
                               "attention": ["default", "efficient"]},
                         limit_bytes=3 * 2**20, store=tmp_path / "t.json")
    session = outcome.session
    assert any("on CUDA only" in why for why in session.refused.values())
    assert session.bounds["fp32, checkpointing off"] < 32  # the finder bounded the micro-batch
    assert all(c["peak_bytes"] <= session.budget_bytes for c in outcome.entry["candidates"])


def test_bad_tuner_input_is_refused_before_anything_runs():
    with pytest.raises(ValueError, match="unknown axes"):
        tune_train(axes={"batch_size": [8]}, device="cpu")
    with pytest.raises(ValueError, match="target_batch=0 must be a positive int"):
        tune_train(target_batch=0, device="cpu")
    with pytest.raises(ValueError, match="tf32 is a CUDA tensor-core mode"):
        tune_train(axes={"precision": ["tf32"]}, device="cpu")


def test_a_contended_search_is_shown_but_never_stored(tmp_path, monkeypatch):
    from a800lab.core import sweep

    monkeypatch.setattr(sweep, "assess", lambda samples, conditions=None, *, on_cpu=False: {
        "noisy": True, "contended": True, "reasons": ["oversubscribed: 3 threads on 2 cores"]})
    store = tmp_path / "tuned.json"
    outcome = tune_train(custom_task(few_layers, a_batch), target_batch=16, axes=SMALL,
                         device="cpu", budget_s=0.05, store=store)
    assert outcome.entry["stored"] is False and outcome.entry["snippet"]
    summary = outcome.summary()
    assert summary.startswith("! not stored: the last round ran on a contended CPU "
                              "(oversubscribed")
    assert "timed on a contended CPU: the ranking may not hold" in summary
    assert "clear of the noise" not in summary  # never beside a contended round
    assert "contended CPU: the ranking may not hold" in \
        frontier_figure(outcome)._suptitle.get_text()  # the picture says so too
    assert not store.exists()


def test_the_noise_clause_never_calls_a_noisy_round_clear():
    quiet = {"within_noise": 0, "noisy_trials": 0, "trials": 8}
    assert noise_clause(quiet) == "clear of the noise"
    assert "either may win" in noise_clause({**quiet, "within_noise": 2})
    noisy = noise_clause({**quiet, "noisy_trials": 3})
    assert "3 of 8 trials were noisy" in noisy and "may not hold" in noisy
    assert "clear" not in noisy
    assert "not stored" in noise_clause({**quiet, "contended": "oversubscribed"})
    assert "tune again" not in noisy  # what to do is the storing clause's, said once


def test_the_storing_clause_says_what_storing_means():
    quiet = {"within_noise": 0, "noisy_trials": 0, "trials": 8, "stored": True}
    assert storing_clause(quiet, "t.json") == ("stored in t.json: the next tune with these "
                                               "settings reuses it (--force tunes again)")
    for doubtful in ({**quiet, "within_noise": 2}, {**quiet, "noisy_trials": 3}):
        clause = storing_clause(doubtful)
        assert clause.startswith("stored all the same, as a pick rather than a clear winner")
        assert "reuses it without measuring" in clause and "--force" in clause
    assert storing_clause({**quiet, "stored": False, "contended": "oversubscribed"}) == ""


class Unblocked(nn.Module):
    """No `blocks` and no nn.Sequential: activation checkpointing cannot wrap it."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def test_every_refusal_carries_its_reason_in_the_entry_summary_and_panel(tmp_path):
    """"3 refused" used to come with no reason (and later configs of the same bound got a
    wrong one: "no micro-batch fits")."""
    from a800lab.widgets.training_tools import TuneBox

    outcome = tune_train(custom_task(Unblocked, a_batch), target_batch=8, device="cpu",
                         budget_s=0.02, store=tmp_path / "t.json",
                         axes={"checkpointing": [False, True],
                               "optimizer_impl": ["for-loop", "fused"]})
    entry = outcome.entry
    assert entry["refused"] == 2 and len(entry["refusals"]) == 2
    assert all(r["config"]["checkpointing"] and "nn.ModuleList `blocks`" in r["reason"]
               for r in entry["refusals"])
    assert ("refused 2 (fp32, checkpointing on, compile off, optimizer for-loop; fp32, "
            "checkpointing on, compile off, optimizer fused): activation checkpointing needs "
            "the model's repeated blocks") in outcome.summary()
    box = TuneBox(on_tune=lambda: None)
    box.show(outcome)
    assert "activation checkpointing needs the model&#x27;s repeated blocks" in box.text.value


def test_a_winner_off_its_frontier_says_why():
    from a800lab.core.search import SearchResult, Trial
    from a800lab.core.timing import Timing
    from a800lab.workloads.training.tune import _frontier_note

    small = {"precision": "fp32", "batch_size": 4, "accum_steps": 2, "checkpointing": True}
    large = {**small, "batch_size": 8, "accum_steps": 1, "checkpointing": False}
    trials = [Trial(small, 0, 0.01, Timing((1.0,), 0, "cpu")),   # 8000 samples/s, round 1
              Trial(large, 0, 0.01, Timing((0.8,), 0, "cpu")),   # faster there: kept
              Trial(large, 1, 0.04, Timing((2.0,), 0, "cpu"))]   # the machine slowed
    result = SearchResult(trials=trials)
    candidates = [{"config": small, "samples_per_s": 8000.0, "peak_bytes": 10, "round": 0,
                   "budget_s": 0.01},
                  {"config": large, "samples_per_s": 4000.0, "peak_bytes": 20, "round": 1,
                   "budget_s": 0.04}]
    frontier = pareto_frontier(candidates)
    assert [c["config"] for c in frontier] == [small] and result.best == large
    note = _frontier_note(result, candidates, frontier, 8)
    assert note.startswith("the winner is off the frontier: fp32, 4 x 2, checkpointing on")
    assert "from round 1 (0.01 s of timing), where the winner ran at 1e+04 samples/s" in note
    assert _frontier_note(result, candidates[1:], pareto_frontier(candidates[1:]), 8) == ""


def test_trials_run_under_their_precisions_tf32_settings(tmp_path, monkeypatch):
    # on a GPU "tf32" and "fp32" differ only in these settings; a trial outside them would time
    # tf32 as fp32
    from contextlib import nullcontext

    from a800lab.workloads.training import candidates

    entered = []
    monkeypatch.setattr(candidates, "precision_context",
                        lambda precision: entered.append(precision) or nullcontext())
    tune_train(custom_task(few_layers, a_batch), target_batch=8, device="cpu", budget_s=0.02,
               axes={**SMALL, "optimizer_impl": ["fused"]}, store=tmp_path / "t.json")
    assert entered and set(entered) == {"fp32"}
    assert entered.count("fp32") >= 4  # every trial, and the reference
