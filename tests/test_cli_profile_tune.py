"""`profile`, `tune train` and the levers of `sweep train` on the command line."""

import json

import pytest

from a800lab.cli import main
from a800lab.core.results import read_records

pytestmark = pytest.mark.usefixtures("one_torch_thread")

USER_MODEL = '''
import torch
from torch import nn


def make_model():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                         nn.Linear(16, 3))


def make_batch(batch_size):
    x = torch.randn(batch_size, 8)
    return x, x[:, :3].argmax(1)
'''


def test_profile_writes_the_trace_and_prints_where_the_time_goes(tmp_path, capsys):
    out = tmp_path / "prof"
    assert main(["profile", "--model", "mlp", "--batch-size", "8", "--steps", "2",
                 "--warmup-steps", "1", "--device", "cpu", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "CPU mode (no device)" in printed and "top ops by CPU self time" in printed
    assert json.loads((out / "trace.json").read_text())["traceEvents"]
    assert json.loads((out / "profile.json").read_text())["spec"]["batch_size"] == 8


def test_profile_of_a_users_model_file(tmp_path, capsys):
    model = tmp_path / "my_model.py"
    model.write_text(USER_MODEL)
    assert main(["profile", "--user-model", str(model), "--batch-size", "4", "--steps", "1",
                 "--warmup-steps", "1", "--device", "cpu", "--out", str(tmp_path / "p"),
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["spec"]["model"] == "custom"


@pytest.mark.usefixtures("quiet_cpu")  # contention must not decide whether it is stored
def test_tune_train_on_a_users_model_prints_the_snippet_and_reuses(tmp_path, capsys):
    model, store = tmp_path / "my_model.py", tmp_path / "tuned.json"
    model.write_text(USER_MODEL)
    args = ["tune", "train", "--user-model", str(model), "--target-batch", "16",
            "--checkpointing", "off", "--optimizer-impl", "foreach", "fused",
            "--budget-s", "0.05", "--device", "cpu", "--store", str(store),
            "--out", str(tmp_path / "trials.jsonl")]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "winner: fp32" in captured.out and "frontier" in captured.out
    assert "# the code to paste:" in captured.out and "optimizer.zero_grad" in captured.out
    assert len(read_records(tmp_path / "trials.jsonl")) >= 8
    assert main(args) == 0
    assert "reused the result tuned at" in capsys.readouterr().err


@pytest.mark.parametrize("extra, says", [
    (["--compile", "reduce-overhead"], "need a CUDA device"),
    (["--model", "mlp", "--attention", "flash"], "the mlp preset has no attention"),
    (["--compile", "on"], "compile='on' is not a choice"),
])
def test_levers_refused_before_anything_runs(tmp_path, capsys, extra, says):
    assert main(["sweep", "train", "--device", "cpu", "--out", str(tmp_path / "t.jsonl"),
                 *extra]) == 2
    assert says in capsys.readouterr().err


def test_sweep_train_sweeps_a_lever_and_records_mfu(tmp_path):
    out = tmp_path / "train.jsonl"
    assert main(["sweep", "train", "--model", "mlp", "--batch-size", "8",
                 "--optimizer-impl", "for-loop", "fused", "--train-steps", "2",
                 "--budget-s", "0.01", "--device", "cpu", "--out", str(out)]) == 0
    records = read_records(out)
    assert [r.params["optimizer_impl"] for r in records] == ["for-loop", "fused"]
    assert all(r.metrics["model_flops_per_sample"] > 0 and r.metrics["achieved_tflops"] > 0
               for r in records)


def test_tune_train_refuses_bad_input(tmp_path, capsys):
    assert main(["tune", "train", "--target-batch", "0", "--device", "cpu",
                 "--store", str(tmp_path / "t.json")]) == 2
    assert "target_batch=0 must be a positive int" in capsys.readouterr().err
    assert main(["tune", "train", "--target-batch", "8", "--user-model", "nope.py",
                 "--device", "cpu"]) == 2
    assert "--user-model nope.py: no such file" in capsys.readouterr().err


@pytest.mark.parametrize("noisy", [False, True])
def test_tune_train_says_once_what_storing_means(tmp_path, capsys, monkeypatch, noisy):
    """A ranking inside the noise is said once (the winner's line) and the stored line says
    what storing means then; a clear one keeps the search's verdict beside "stored"."""
    from a800lab.core import sweep

    spread = {"noisy": noisy, "contended": False, "iqr_ms": 0.0, "iqr_over_median": 0.0,
              "reasons": ["timing spread: planted"] if noisy else []}
    monkeypatch.setattr(sweep, "assess", lambda *a, **k: dict(spread))
    model, store = tmp_path / "my_model.py", tmp_path / "tuned.json"
    model.write_text(USER_MODEL)
    assert main(["tune", "train", "--user-model", str(model), "--target-batch", "8",
                 "--checkpointing", "off", "--optimizer-impl", "foreach", "fused",
                 "--budget-s", "0.02", "--device", "cpu", "--threads", "1",
                 "--store", str(store)]) == 0
    captured = capsys.readouterr()
    said = captured.err + captured.out
    doubts = said.count("the ranking may not hold") + said.count("either may win a re-run")
    if noisy or "clear of the noise" not in captured.out:  # noisy trials, or rivals in reach
        assert f"stored in {store} all the same, as a pick rather than a clear winner" in \
            captured.err
        assert doubts == 1 and "outside the noise" not in said and "clear of" not in said
    else:
        assert f"(outside the noise); stored in {store}: the next tune" in captured.err
        assert doubts == 0
