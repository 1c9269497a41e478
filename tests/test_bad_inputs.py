"""Bad input to the newer commands and panels: refused up front with a message naming the value,
in the panel at construction as in the CLI; nothing measured under a value that means nothing."""

import json
import math
import os
from pathlib import Path

import pytest

from a800lab.cli import main


@pytest.mark.parametrize("argv, says", [
    (["tune", "tiles", "--size", "0"], "m=0 must be a positive int"),  # 0 is a value, not "absent"
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
    (lambda w: w.MatmulExplorer(size=0, device="cpu"), "size=0 must be a positive int"),
    (lambda w: w.MatmulExplorer(size=100.5, device="cpu"), "size=100.5 must be a positive int"),
    (lambda w: w.MatmulExplorer(card="B9000", device="cpu"), "no single SM count for 'B9000'"),
    (lambda w: w.TrainingExplorer(lr=-1, device="cpu"), "lr=-1 must be a finite number > 0"),
    (lambda w: w.TrainingExplorer(train_steps=0, device="cpu"), "train_steps=0"),
    (lambda w: w.CommExplorer(world_size=0), "world_size=0"),
    (lambda w: w.CommExplorer(backend="nccl"), "NCCL needs one GPU per rank"),
    (lambda w: w.CommExplorer(backend="mpi"), "backend='mpi'"),
    (lambda w: w.CommExplorer(timeout_s=-1), "timeout_s=-1 must be a number of seconds > 0"),
    (lambda w: w.CostExplorer(price_per_gpu_hour_usd=-3, device="cpu"),
     "price_per_gpu_hour_usd=-3 must be a finite number from 0 to 10000"),
    (lambda w: w.CostExplorer(price_per_gpu_hour_usd=math.nan, device="cpu"),
     "price_per_gpu_hour_usd=nan"),
    (lambda w: w.CostExplorer(gpus=0, device="cpu"), "gpus=0 must be a positive int"),
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


# ---- paths at the edges: refused in one line naming the value, before anything runs ----------
def _as_a_user(monkeypatch):
    """os.access as a user who is not root sees it: a folder without write bits refuses. Tests
    run as root here, where a chmod'ed folder stays writable for real, so the check's first
    question (os.access) is answered as it is for everyone else; the probe write that follows
    is tested for real with /proc (not faked), which refuses root too."""
    real = os.access

    def access(path, mode, *args, **kwargs):
        if mode & os.W_OK and not os.stat(path).st_mode & 0o222:
            return False
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)


def _paths(tmp_path, monkeypatch, where):
    if where != "PROC":
        _as_a_user(monkeypatch)
    (tmp_path / "afile").write_text("x")
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o555)
    return {"FILE": tmp_path / "afile", "UNDER_FILE": tmp_path / "afile" / "sub",
            "RO": tmp_path / "ro", "IN_RO": tmp_path / "ro" / "new",
            "PROC": Path("/proc/a800")}[where]


def _one_line(capsys, says, value):
    out, err = capsys.readouterr()
    assert says in err and str(value) in err, err
    assert err.strip().count("\n") == 0 and "Traceback" not in err, err  # one line
    assert out == ""  # nothing profiled, nothing copied


FOLDER_CASES = [("FILE", "is a file, not a folder"),
                ("UNDER_FILE", "is a file, so no folder can be made under it"),
                ("RO", "no permission to write there"), ("IN_RO", "no permission to write there"),
                ("PROC", "a file made there fails")]


@pytest.mark.parametrize("where, says", FOLDER_CASES)
def test_profile_refuses_an_out_folder_it_cannot_write_before_profiling(
        tmp_path, capsys, monkeypatch, where, says):
    out = _paths(tmp_path, monkeypatch, where)
    assert main(["profile", "--device", "cpu", "--out", str(out)]) == 2
    _one_line(capsys, says, out)
    assert not (tmp_path / "ro" / "new").exists()  # the check makes nothing


@pytest.mark.parametrize("where, says", FOLDER_CASES)
def test_chapters_refuses_a_folder_it_cannot_write(tmp_path, capsys, monkeypatch, where, says):
    to = _paths(tmp_path, monkeypatch, where)
    assert main(["chapters", "--to", str(to)]) == 2
    _one_line(capsys, says, to)


@pytest.mark.parametrize("command", [["profile", "--device", "cpu"],
                                     ["tune", "train", "--target-batch", "8", "--device", "cpu"]])
@pytest.mark.parametrize("make, says", [
    (lambda d: d, "is a folder"),
    (lambda d: d / "model.txt", "is not a .py file"),
    (lambda d: d / "missing.py", "no such file"),
    (lambda d: d / "missing", "no such file"),
    (lambda d: d / "broken.py", "line 1: invalid syntax; fix the file"),
    (lambda d: d / "boom.py", "line 2): ZeroDivisionError"),
    (lambda d: d / "needs.py", "imports not_a_module_here, which is not installed"),
    (lambda d: "not_a_module_here", "no such file or module"),
])
def test_a_user_model_that_does_not_load_is_one_line(tmp_path, capsys, command, make, says):
    (tmp_path / "model.txt").write_text("def make_model(): ...\n")
    (tmp_path / "broken.py").write_text("def make_model(:\n    pass\n")
    (tmp_path / "boom.py").write_text("import math\nx = 1 / 0\n")
    (tmp_path / "needs.py").write_text("import not_a_module_here\n")
    where = make(tmp_path)
    assert main([*command, "--user-model", str(where)]) == 2
    _one_line(capsys, says, where)


@pytest.mark.parametrize("argv, says", [
    (["report", "--quick", "--out", "FILE/sub"], "is a file, so no folder can be made under it"),
    (["report", "--compare", "a", "b", "--out", "FILE/sub"], "so no folder can be made"),
    (["tune", "train", "--target-batch", "8", "--device", "cpu", "--store", "FILE/t.json"],
     "--store: cannot create"),
    (["tune", "tiles", "--size", "64", "--device", "cpu", "--store", "FILE/t.json"],
     "--store: cannot create"),
    (["tune", "tiles", "--size", "64", "--device", "cpu", "--store", "DIR"],
     "is a folder; give a file"),
])
def test_a_report_folder_or_a_tuners_store_that_cannot_be_written_is_refused_first(
        tmp_path, capsys, argv, says):
    (tmp_path / "afile").write_text("x")
    argv = [a.replace("FILE", str(tmp_path / "afile")).replace("DIR", str(tmp_path))
            for a in argv]
    assert main(argv) == 2
    _one_line(capsys, says, "")
