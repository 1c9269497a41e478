"""Bad input to the newer commands and panels: refused up front with a message naming the value,
in the panel at construction as in the CLI; nothing measured under a value that means nothing."""

import json
import math

import pytest

from a800lab.cli import main


@pytest.mark.parametrize("argv, says", [
    (["tune", "--size", "0"], "m=0 must be a positive int"),  # 0 is a value, not "absent"
    (["tune", "tiles", "--m", "0", "--n", "8", "--k", "8"], "m=0 must be a positive int"),
    (["comm", "collectives", "--nproc", "0", "--out", "OUT"], "world_size=0"),
    (["comm", "collectives", "--nproc", "64", "--out", "OUT"], "world_size=64"),
    (["sweep", "tiles", "--size", "64", "--backend", "triton", "--out", "OUT"],
     "--backend triton needs a CUDA GPU"),
])
def test_the_cli_refuses_with_the_value(tmp_path, capsys, argv, says):
    out = tmp_path / "r.jsonl"
    assert main([str(out) if a == "OUT" else a for a in argv]) == 2
    assert says in capsys.readouterr().err
    assert not out.exists()  # nothing measured, no rank started


def test_too_many_ranks_say_why(capsys):
    from a800lab.workloads.comm.runs import check_local_ranks

    with pytest.raises(ValueError, match=r"world_size=64: .*(GiB|usable core)"):
        check_local_ranks(64, "gloo")
    with pytest.raises(ValueError, match="use 'gloo'"):
        check_local_ranks(2, "mpi")


def test_a_tile_error_names_the_values_given(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # past the no-GPU check, to the tile itself
    assert main(["sweep", "tiles", "--size", "64", "--backend", "triton", "--block-m", "1024",
                 "--block-n", "64", "--out", str(tmp_path / "r.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "block_m=1024 x block_n=64" in err and "block_n=128" not in err


@pytest.mark.parametrize("make, says", [
    (lambda w: w.MatmulExplorer(size=0, device="cpu"), "size=0 is outside the allowed range"),
    (lambda w: w.MatmulExplorer(size=100.5, device="cpu"), "size: 100.5 is not an integer"),
    (lambda w: w.MatmulExplorer(card="B9000", device="cpu"), "no single SM count for 'B9000'"),
    (lambda w: w.TrainingExplorer(lr=-1, device="cpu"), "lr=-1 must be a finite number > 0"),
    (lambda w: w.TrainingExplorer(train_steps=0, device="cpu"), "train_steps=0"),
    (lambda w: w.CommExplorer(world_size=0), "world_size=0"),
    (lambda w: w.CommExplorer(backend="nccl"), "NCCL needs one GPU per rank"),
    (lambda w: w.CommExplorer(backend="mpi"), "backend='mpi'"),
    (lambda w: w.CommExplorer(timeout_s=-1), "timeout_s=-1 must be a number of seconds > 0"),
    (lambda w: w.CostExplorer(price_per_gpu_hour_usd=-3, device="cpu"),
     "price_per_gpu_hour_usd=-3 must be a price"),
    (lambda w: w.CostExplorer(price_per_gpu_hour_usd=math.nan, device="cpu"),
     "price_per_gpu_hour_usd=nan"),
    (lambda w: w.CostExplorer(gpus=0, device="cpu"), "gpus=0 must be a whole number"),
    (lambda w: w.CostExplorer(duration_s=-1, device="cpu"), "duration_s=-1"),
])
def test_panels_refuse_at_construction(make, says):
    from a800lab import widgets

    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        make(widgets)


def test_find_max_batch_refuses_a_target_of_zero():
    from a800lab.widgets import TrainingExplorer

    panel = TrainingExplorer(model="mlp", device="cpu")
    assert panel.find_max_batch(wait=True, target_batch=0) is False
    assert "target_batch=0 must be a positive int" in panel.status_text
    assert panel.max_batch_result is None


def test_a_torn_last_line_is_the_labs_own_one_line_notice(tmp_path, capsys):
    from a800lab.core.results import Record, append_record

    out = tmp_path / "runs.jsonl"
    append_record(out, Record(workload="matmul", params={"size": 16, "precision": "fp32"},
                              outcome="error", message="x"))
    with open(out, "a") as f:
        f.write('{"workload": "matmul", "par')  # a writer killed mid-line
    assert main(["diff", str(out), str(out)]) == 0
    err = capsys.readouterr().err
    assert "a800lab: note:" in err and "torn last line" in err
    assert "UserWarning" not in err and "warnings.warn" not in err
    json.dumps(err)
