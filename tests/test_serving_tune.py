"""tune serve: online (default), the config and batcher with the most goodput, the winner
offered its goodput again, the closed-loop choice offered the rate it promises; offline, the
most samples/s whose p99 meets a target, found by the shared search, its winner measured again
on its own; the frontier; the CLI."""

import json

import pytest

from a800lab.cli import main
from a800lab.core.results import read_records
from a800lab.core.timing import Timing
from a800lab.figures.tune import frontier_figure
from a800lab.workloads.serving import tune
from a800lab.workloads.serving.online import tune_online
from a800lab.workloads.serving.tune import tune_serve

pytestmark = pytest.mark.usefixtures("one_torch_thread", "quiet_cpu")
AXES = {"batch_size": [1, 4, 16, 64], "precision": ["fp32"]}


def test_the_transformer_presets_winner_meets_the_target_when_measured_again(tmp_path):
    """A target a loaded 2-core box still meets (its p99 is scheduler slices of 5-20 ms);
    the logic under a tight target is tested with set latencies below."""
    out = tmp_path / "trials.jsonl"
    outcome = tune_serve(50.0, model="transformer", size="tiny", axes=AXES, device="cpu",
                         requests=100, budget_s=0.05, out=out)
    assert outcome.winner is not None, outcome.summary()
    again = outcome.remeasured
    assert again["meets_target"] and again["p99_ms"] <= 50.0 and again["requests"] >= 100
    records = read_records(out)
    last = records[-1]  # the re-measurement: a trial of its own after the search's rounds
    assert {k: last.params[k] for k in outcome.winner} == outcome.winner
    assert last.metrics["p99_ms"] == again["p99_ms"] and last.metrics["p99_target_ms"] == 50.0
    assert {r.workload for r in records} == {"tune-serve"}
    assert len(records) >= len(AXES["batch_size"]) + 1
    frontier = outcome.frontier
    pairs = zip(frontier, frontier[1:], strict=False)
    assert frontier and all(a["p99_ms"] <= b["p99_ms"] and a["samples_per_s"] <
                            b["samples_per_s"] for a, b in pairs)
    assert "winner: batch" in outcome.summary() and "def answer(x)" in outcome.snippet
    figure = frontier_figure(outcome)
    gids = {line.get_gid() for line in figure.axes[0].lines}
    assert {"frontier", "target", "winner"} <= gids


def test_a_winner_that_misses_when_measured_again_gives_way_to_the_next(monkeypatch):
    """Set latencies (1 ms + 0.1 ms per sample of the batch; batch 16's third answer 20 ms):
    batch 64 misses a 3 ms p99 in the search, batch 16 wins it and misses when measured
    again, so batch 4 is measured again and wins."""
    seen = {}

    def answer(model, size, *, batch_size, requests, **rest):
        seen[batch_size] = seen.get(batch_size, 0) + 1
        latency = 20.0 if batch_size == 16 and seen[16] == 3 else 1.0 + 0.1 * batch_size
        timing = Timing((latency,) * requests, 0, "cpu")
        return {"throughput": batch_size / latency * 1e3, "timing": timing, "p50_ms": latency,
                "p99_ms": latency, "requests": requests}

    monkeypatch.setattr(tune, "serve_point", answer)
    outcome = tune_serve(3.0, axes=AXES, device="cpu", requests=100, budget_s=0.05)
    assert outcome.search.best["batch_size"] == 16 and seen[16] == 3
    assert outcome.winner["batch_size"] == 4 and outcome.remeasured["tries"] == 2
    assert outcome.remeasured["p99_ms"] == pytest.approx(1.4)
    assert [c["config"]["batch_size"] for c in outcome.frontier] == [1, 4, 16, 64]
    assert "p99 1.4 ms <= 3 ms in a separate re-measurement" in outcome.summary()


def test_an_unreachable_target_finds_no_config_and_says_so():
    outcome = tune_serve(1e-4, model="transformer", size="tiny",
                         axes={"batch_size": [1, 2], "precision": ["fp32"]}, device="cpu",
                         requests=100, budget_s=0.02)
    assert outcome.winner is None and not outcome.snippet
    assert "no config" in outcome.summary()
    assert all("over-target" in why for why in outcome.search.failed.values())


def test_tune_serve_offline_on_the_command_line(tmp_path, capsys):
    argv = ["tune", "serve", "--offline", "--model", "transformer", "--batch-size", "1", "8",
            "--precision", "fp32", "--requests", "100", "--budget-s", "0.02", "--device",
            "cpu", "--threads", "1"]
    assert main([*argv, "--p99-ms", "50"]) == 0
    printed = capsys.readouterr().out
    assert "separate re-measurement" in printed and "# the code to paste:" in printed
    assert main([*argv, "--p99-ms", "0.0001"]) == 1
    assert "no config" in capsys.readouterr().out


def test_online_the_winner_meets_the_target_at_its_goodput_and_the_closed_choice_is_said(
        tmp_path):
    """The chapter's model (the tiny Transformer) under a target a loaded 2-core box meets."""
    out = tmp_path / "trials.jsonl"
    outcome = tune_online(50.0, model="transformer", size="tiny", axes={"precision": ["fp32"]},
                          batcher_axes={"max_batch": [1, 8], "max_delay_ms": [0.0]},
                          duration_s=0.3, device="cpu", budget_s=0.05, out=out)
    assert outcome.winner is not None, outcome.summary()
    again = outcome.remeasured
    assert again["meets_target"] and again["ci_high_ms"] <= 50.0 and not again["saturated"]
    assert outcome.goodput_rps == again["rate_rps"] > 0
    choice = outcome.closed_choice
    assert choice["config"] == outcome.closed_loop.winner and choice["rate_rps"] > 0
    summary = outcome.summary()
    assert "closed-loop choice" in summary and f"{choice['rate_rps']:.4g} requests/s" in summary
    records = read_records(out)
    assert {r.workload for r in records} == {"tune-serve", "tune-load"}
    last_load = [r for r in records if r.workload == "tune-load"]
    assert any(r.params["rate_rps"] == again["rate_rps"] for r in last_load)
    assert "max_batch_size" in outcome.snippet and "def answer(x)" in outcome.snippet


def test_tune_serve_online_on_the_command_line(tmp_path, capsys):
    argv = ["tune", "serve", "--model", "mlp", "--precision", "fp32", "--max-batch", "1", "4",
            "--max-delay-ms", "0", "--duration-s", "0.3", "--budget-s", "0.05", "--device",
            "cpu", "--threads", "1", "--p99-ms", "50", "--json"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "winner: max batch" in printed and "closed-loop choice" in printed
    answer = json.loads(printed[printed.index("\n{") + 1:])
    assert answer["goodput_rps"] > 0 and answer["p99_ms"] <= 50
    assert answer["goodput_rps"] == answer["remeasured"]["rate_rps"]
    for bad, says in ((["--batch-size", "4"], "--batch-size is the closed loop's axis"),
                      (["--offline", "--max-batch", "4"], "--max-batch sets the online"),
                      (["--offline", "--percentile", "95"], "--offline judges the p99"),
                      (["--max-delay-ms", "-1"], "max_delay_ms=-1.0 must"),
                      (["--max-batch", "0"], "max_batch=0 must"),
                      (["--duration-s", "0"], "duration_s=0.0 must")):
        assert main(["tune", "serve", "--model", "mlp", "--device", "cpu", "--p99-ms", "50",
                     *bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err
