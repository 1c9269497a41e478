"""The command line: doctor, peak and a headless matmul sweep with resume and bad input."""

import json
import re
import subprocess
import sys

import pytest

from a800lab.cli import main
from a800lab.core.results import read_records


def test_module_entry_point_runs_doctor_json():
    proc = subprocess.run([sys.executable, "-m", "a800lab", "doctor", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["gpu_found"] is False  # this CI machine has no GPU
    assert report["advice"][0].startswith("No NVIDIA GPU found")
    assert report["cpu"]["logical_cores"] >= 1


def test_doctor_table(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "Advice:" in out and "No NVIDIA GPU found" in out


def test_sweep_writes_and_resumes(tmp_path, capsys):
    out = tmp_path / "runs.jsonl"
    args = ["sweep", "matmul", "--size", "32", "64", "--budget-s", "0.01", "--out", str(out)]
    assert main(args) == 0
    records = read_records(out)
    assert [(r.params["size"], r.outcome) for r in records] == [(32, "ok"), (64, "ok")]
    assert records[0].throughput_unit == "TFLOP/s" and records[0].metrics["rel_error"] < 1e-5
    assert main(args[:4] + ["96"] + args[4:]) == 0
    assert [r.params["size"] for r in read_records(out)] == [32, 64, 96]
    assert re.search(r"1 points measured(, 1 noisy \(marked !\))?, 2 already in",
                     capsys.readouterr().err)


def test_sweep_rectangular_shapes(tmp_path):
    out = tmp_path / "runs.jsonl"
    assert main(["sweep", "matmul", "--m", "16", "--n", "32", "--k", "8", "24",
                 "--budget-s", "0.01", "--out", str(out)]) == 0
    assert [r.params for r in read_records(out)] == [
        {"m": 16, "n": 32, "k": 8, "precision": "fp32"},
        {"m": 16, "n": 32, "k": 24, "precision": "fp32"}]


def test_bad_input_exits_2_with_a_message(tmp_path, capsys):
    out = str(tmp_path / "runs.jsonl")
    assert main(["sweep", "matmul", "--size", "-5", "--out", out]) == 2
    assert "m=-5 must be a positive int" in capsys.readouterr().err
    assert main(["sweep", "matmul", "--size", "8", "--precision", "fp99", "--out", out]) == 2
    assert "unknown precision 'fp99'" in capsys.readouterr().err
    assert main(["sweep", "matmul", "--size", "8", "--out", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert not (tmp_path / "runs.jsonl").exists()  # nothing ran


def test_peak_json_is_recorded_for_tile_points(capsys, tmp_path, monkeypatch):
    from a800lab.core.environment import environment
    from a800lab.workloads import peak as peak_module
    from a800lab.workloads.peak import measured_peak

    # the subject is recording: judge the figures clean (noisy ones have their own test)
    monkeypatch.setattr(peak_module, "assess", lambda *a, **k: {"noisy": False, "reasons": []})
    monkeypatch.setenv("A800LAB_PEAKS", str(tmp_path / "peaks.json"))
    assert main(["peak", "--json", "--device", "cpu"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["entries"][0]["precision"] == "fp32" and report["entries"][0]["tflops"] > 0
    assert report["mem_bw_gbs"] > 0
    assert f"peaks recorded in {tmp_path / 'peaks.json'}" in captured.err
    assert measured_peak(environment("cpu"), "fp32") == report["entries"][0]["tflops"]
    assert main(["peak", "--device", "cpu", "--no-store"]) == 0
    assert "recorded" not in capsys.readouterr().err


def test_peak_under_a_busy_loop_says_noisy_and_records_nothing(tmp_path, capsys, monkeypatch):
    """All cores for torch and a busy loop beside it: oversubscribed by construction."""
    from a800lab.core.noise import usable_cores

    monkeypatch.setenv("A800LAB_PEAKS", str(tmp_path / "peaks.json"))
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        assert main(["peak", "--device", "cpu", "--json", "--threads",
                     str(usable_cores())]) == 0
    finally:
        busy.kill()
        busy.wait()
    captured = capsys.readouterr()
    (entry,) = json.loads(captured.out)["entries"]
    assert any(r.startswith("oversubscribed") for r in entry["noise"]["reasons"])
    assert entry["noisy"] and "not recorded, noisy: fp32" in captured.err
    store = tmp_path / "peaks.json"
    recorded = json.loads(store.read_text()) if store.exists() else {}
    assert all("fp32" not in e["tflops"] for e in recorded.values())


def test_duplicates_and_aliases_are_measured_once(tmp_path, capsys):
    out = tmp_path / "runs.jsonl"
    assert main(["sweep", "matmul", "--size", "16", "16", "--precision", "fp32", "float32",
                 "--budget-s", "0.01", "--out", str(out)]) == 0
    assert [r.params for r in read_records(out)] == [{"size": 16, "precision": "fp32"}]


@pytest.mark.parametrize("budget", ["-1", "nan", "inf", "0"])
def test_bad_budgets_are_refused_up_front(tmp_path, capsys, budget):
    out = tmp_path / "runs.jsonl"
    assert main(["sweep", "matmul", "--size", "8", "--budget-s", budget, "--out", str(out)]) == 2
    assert f"--budget-s {float(budget)} must be a finite number of seconds > 0" in \
        capsys.readouterr().err
    assert not out.exists()


def test_outs_that_cannot_be_written_are_refused_up_front(tmp_path, capsys):
    assert main(["sweep", "matmul", "--size", "8", "--out", ""]) == 2
    assert "results path is empty" in capsys.readouterr().err
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["sweep", "matmul", "--size", "8", "--out", str(blocker / "r.jsonl")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert main(["sweep", "matmul", "--size", "8", "--out", "/proc/r.jsonl"]) == 2
    assert "cannot write results to '/proc/r.jsonl'" in capsys.readouterr().err


def test_a_point_too_big_for_memory_is_an_oom_line_not_a_crash(tmp_path, capsys):
    out = tmp_path / "runs.jsonl"
    assert main(["sweep", "matmul", "--size", "200000", "--device", "cpu", "--out",
                 str(out)]) == 0
    (record,) = read_records(out)
    assert record.outcome == "oom" and "not attempted" in record.message
    assert "oom out of memory (not attempted)" in capsys.readouterr().err


def test_noisy_points_are_marked_with_their_reasons(tmp_path, capsys, monkeypatch):
    from a800lab.core import sweep as sweep_mod

    def noisy(samples_ms, conditions=None, *, on_cpu=False):
        return {"noisy": True, "iqr_ms": 1.0, "iqr_over_median": 0.5,
                "reasons": ["oversubscribed: 2 torch thread(s) + 1.0 cores busy"]}

    monkeypatch.setattr(sweep_mod, "assess", noisy)
    out = tmp_path / "runs.jsonl"
    assert main(["sweep", "matmul", "--size", "8", "--budget-s", "0.01", "--threads", "1",
                 "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "! {'size': 8, 'precision': 'fp32'}: ok" in err and "(IQR 50% of median)" in err
    assert "    ! oversubscribed: 2 torch thread(s)" in err
    assert "1 points measured, 1 noisy (marked !)" in err
    assert read_records(out)[0].conditions["torch_threads"] == 1


def test_slow_cpu_precisions_get_a_note_before_running(tmp_path, capsys, monkeypatch):
    from a800lab.workloads import matmul as matmul_mod

    monkeypatch.setattr(matmul_mod, "cpu_slowdown_note",
                        lambda p: "bf16 is slow here" if p == "bf16" else "")
    assert main(["sweep", "matmul", "--size", "8", "--precision", "bf16", "--device", "cpu",
                 "--budget-s", "0.01", "--out", str(tmp_path / "r.jsonl")]) == 0
    assert capsys.readouterr().err.startswith("note: bf16 is slow here\n")


def test_sweep_tiles_runs_the_cpu_stand_in_over_tile_axes(tmp_path, capsys):
    out = tmp_path / "tiles.jsonl"
    assert main(["sweep", "tiles", "--size", "64", "--block-m", "16", "32", "--block-n", "32",
                 "--budget-s", "0.01", "--threads", "1", "--out", str(out)]) == 0
    records = read_records(out)
    assert [(r.workload, r.params["block_m"], r.outcome) for r in records] == [
        ("tiles", 16, "ok"), ("tiles", 32, "ok")]
    assert records[0].params["backend"] == "cpu_blocked"
    assert "CPU stand-in" in records[0].metrics["backend_label"]


def test_tile_typos_exit_before_running(tmp_path, capsys):
    out = tmp_path / "tiles.jsonl"
    assert main(["sweep", "tiles", "--size", "64", "--block-m", "48", "--out", str(out)]) == 2
    assert "block_m=48 must be a power of two" in capsys.readouterr().err
    assert main(["sweep", "tiles", "--size", "64", "--num-warps", "4", "--out", str(out)]) == 2
    assert "no meaning for backend='cpu_blocked'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["sweep", "matmul", "--size", "64", "--block-m", "64", "--out", str(out)])
    assert "a800lab sweep matmul: error: unrecognized arguments: --block-m 64" in \
        capsys.readouterr().err
    assert not out.exists()


def test_tune_finds_stores_and_reuses(tmp_path, capsys, quiet_cpu):
    store, out = tmp_path / "tuned.json", tmp_path / "trials.jsonl"
    args = ["tune", "tiles", "--size", "64", "--block-m", "16", "64", "--block-n", "16", "64",
            "--block-k", "64", "--budget-s", "0.01", "--threads", "1", "--store", str(store)]
    assert main(args + ["--out", str(out)]) == 0
    captured = capsys.readouterr()
    best = json.loads(captured.out)["best"]
    assert set(best) == {"block_m", "block_n", "block_k", "group_m"} and best["block_k"] == 64
    assert "tuning 64x64x64 fp32 on cpu (cpu_blocked): 4 configs" in captured.err
    assert f"stored in {store}" in captured.err
    assert {r.workload for r in read_records(out)} == {"tiles"}
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "reused the result tuned at" in captured.err
    assert json.loads(captured.out)["best"] == best
    assert main(["tune", "tiles", "--size", "64", "--backend", "torch", "--store", str(store)]) == 2
    assert "cuBLAS picks its own tiles" in capsys.readouterr().err


def test_cpu_runs_leave_a_core_free_by_default(tmp_path, capsys):
    from a800lab.core.noise import default_cpu_threads

    out = tmp_path / "runs.jsonl"
    assert main(["sweep", "matmul", "--size", "16", "--device", "cpu", "--budget-s", "0.01",
                 "--out", str(out)]) == 0
    assert read_records(out)[0].conditions["torch_threads"] == default_cpu_threads()
    assert f"CPU: {default_cpu_threads()} torch thread(s)" in capsys.readouterr().err


def test_sweep_train_writes_training_records_and_resumes(tmp_path, capsys):
    out = tmp_path / "train.jsonl"
    args = ["sweep", "train", "--model", "mlp", "--batch-size", "4", "8", "--accum-steps", "2",
            "--train-steps", "2", "--budget-s", "0.01", "--device", "cpu", "--out", str(out)]
    assert main(args) == 0
    records = read_records(out)
    assert [(r.workload, r.params["batch_size"], r.outcome) for r in records] == [
        ("train", 4, "ok"), ("train", 8, "ok")]
    first = records[0]
    assert first.params == {"model": "mlp", "size": "tiny", "accum_steps": 2,
                            "precision": "fp32", "optimizer": "adamw", "checkpointing": False,
                            "batch_size": 4}
    assert first.throughput_unit == "samples/s" and first.metrics["effective_batch"] == 8
    assert first.metrics["param_bytes"] > 0 and len(first.metrics["loss_curve"]) == 2
    err = capsys.readouterr().err
    assert "[2/2" in err and "samples/s" in err
    assert main(args) == 0
    assert "0 points measured, 2 already in" in capsys.readouterr().err


@pytest.mark.parametrize("extra, says", [
    (["--batch-size", "0"], "batch_size=0 must be a positive int"),
    (["--accum-steps", "0"], "accum_steps=0 must be a positive int"),
    (["--precision", "tf32"], "tf32 is a CUDA tensor-core mode"),
    (["--model", "resnet"], "unknown model 'resnet'"),
    (["--train-steps", "0"], "--train-steps 0 must be at least 1"),
])
def test_sweep_train_refuses_bad_input_before_running(tmp_path, capsys, extra, says):
    out = tmp_path / "train.jsonl"
    assert main(["sweep", "train", "--device", "cpu", "--out", str(out), *extra]) == 2
    assert says in capsys.readouterr().err
    assert not out.exists()


def test_options_of_one_workload_are_refused_by_another(tmp_path, capsys):
    out = str(tmp_path / "r.jsonl")
    with pytest.raises(SystemExit):
        main(["sweep", "matmul", "--size", "8", "--batch-size", "4", "--out", out])
    assert "sweep matmul: error: unrecognized arguments: --batch-size 4" in \
        capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["sweep", "train", "--size", "8", "--out", out])
    assert "sweep train: error: unrecognized arguments: --size 8" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["comm", "collectives", "--hook", "fp16_compress", "--out", out])
    assert "comm collectives: error: unrecognized arguments: --hook" in capsys.readouterr().err


def test_max_batch_prints_a_verified_answer_and_its_plan(tmp_path, capsys):
    out = tmp_path / "searches.jsonl"
    assert main(["max-batch", "--model", "transformer", "--limit-mib", "8",
                 "--target-batch", "300", "--device", "cpu", "--threads", "1",
                 "--out", str(out)]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["batch_size"] > 1 and result["measured_bytes"] <= result["budget_bytes"]
    plan = result["plan"]
    assert plan["batch_size"] * plan["accum_steps"] == 300
    assert result["spec"]["model"] == "transformer"
    assert "  probe 1 x 2: ok" in captured.err and "  verify " in captured.err
    assert "Largest micro-batch" in captured.err
    assert json.loads(out.read_text().splitlines()[-1]) == result


def test_max_batch_bad_input_exits_2(capsys):
    assert main(["max-batch", "--margin", "1.5"]) == 2
    assert "--margin 1.5 must be in [0, 1)" in capsys.readouterr().err
    assert main(["max-batch", "--limit-mib", "-3"]) == 2
    assert "--limit-mib -3.0 must be a number of MiB > 0" in capsys.readouterr().err
    assert main(["max-batch", "--precision", "bf17"]) == 2
    assert "unknown training precision 'bf17'" in capsys.readouterr().err


def test_comm_collectives_on_two_ranks_and_resume(tmp_path, capsys):
    out = tmp_path / "comm.jsonl"
    args = ["comm", "collectives", "--op", "all_reduce", "all_gather", "--size", "4K", "64K",
            "--budget-s", "0.02", "--out", str(out)]
    assert main(args) == 0
    records = read_records(out)
    assert [(r.params["op"], r.params["size_bytes"], r.outcome) for r in records] == [
        ("all_reduce", 4096, "ok"), ("all_reduce", 65536, "ok"), ("all_gather", 4096, "ok"),
        ("all_gather", 65536, "ok")]
    assert all(r.params["world_size"] == 2 and r.params["backend"] == "gloo" for r in records)
    err = capsys.readouterr().err
    assert "torch thread(s) per rank" in err and "GB/s busbw" in err and "[4/4" in err
    assert main(args) == 0  # resumed: nothing left, no rank started
    assert "0 points measured" in capsys.readouterr().err


def test_comm_bad_input_exits_2_before_any_rank(tmp_path, capsys):
    out = str(tmp_path / "comm.jsonl")
    assert main(["comm", "collectives", "--size", "12Q", "--out", out]) == 2
    assert "--size '12Q': give bytes or a number with K, M or G" in capsys.readouterr().err
    assert main(["comm", "collectives", "--op", "allreduce", "--out", out]) == 2
    assert "op='allreduce' is not a choice" in capsys.readouterr().err
    assert main(["comm", "ddp", "--hook", "int8", "--out", out]) == 2
    assert "hook='int8' is not a choice" in capsys.readouterr().err
    assert main(["comm", "ddp", "--nproc", "1", "--out", out]) == 2
    assert "needs at least 2 ranks" in capsys.readouterr().err
    assert not (tmp_path / "comm.jsonl").exists()


def test_comm_under_torchrun_writes_the_same_records(tmp_path):
    out = tmp_path / "comm.jsonl"
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
                           "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0",
                           "-m", "a800lab", "comm", "collectives", "--op",
                           "hierarchical_all_reduce", "--size", "64K", "--budget-s", "0.02",
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (record,) = read_records(out)  # rank 0 alone writes
    assert record.outcome == "ok" and record.params["ranks_per_node"] == 2  # LOCAL_WORLD_SIZE
    assert record.params["world_size"] == 2 and record.metrics["bus_factor"] == 1.0


def test_the_parser_table_has_every_command_and_each_refuses_foreign_options(capsys):
    from a800lab.cli import build_parser

    parser = build_parser()
    for argv in (["doctor"], ["peak"], ["diff", "a", "b"], ["health", "--stress"],
                 ["sweep", "matmul", "--size", "8", "--out", "r"],
                 ["sweep", "tiles", "--size", "8", "--block-m", "32", "--out", "r"],
                 ["sweep", "train", "--batch-size", "4", "--out", "r"],
                 ["tune", "tiles", "--size", "8"], ["max-batch"],
                 ["comm", "collectives", "--size", "1K", "--out", "r"],
                 ["comm", "ddp", "--hook", "allreduce", "--out", "r"], ["report", "--quick"]):
        args = parser.parse_args(argv)
        assert callable(args.run) and args.command == argv[0], argv
    for argv, foreign in ((["sweep", "tiles", "--size", "8", "--out", "r"], "--batch-size"),
                          (["max-batch"], "--size"), (["peak"], "--out"),
                          (["comm", "ddp", "--out", "r"], "--op"),
                          (["tune", "tiles", "--size", "8"], "--no-resume")):
        with pytest.raises(SystemExit):
            main([*argv, foreign, "1"])
        err = capsys.readouterr().err
        assert f"unrecognized arguments: {foreign} 1" in err, (argv, err)


def test_a_cpu_run_that_will_take_minutes_says_so_up_front(tmp_path, capsys, monkeypatch):
    from a800lab.workloads import matmul as matmul_mod

    monkeypatch.setattr(matmul_mod, "cpu_call_s", lambda m, n, k, p, calls=1: 30.0)
    assert main(["sweep", "matmul", "--size", "64", "128", "--device", "cpu", "--budget-s",
                 "0.01", "--out", str(tmp_path / "r.jsonl")]) == 0
    err = capsys.readouterr().err
    assert "note: on this CPU one 128x128x128 product takes about 30 s, so these 2 point(s) " \
           "take about 8 minutes" in err
    assert err.index("note: on this CPU") < err.index("[1/2")  # before anything is measured
    monkeypatch.setattr(matmul_mod, "cpu_call_s", lambda m, n, k, p, calls=1: 1e-4)
    assert main(["sweep", "matmul", "--size", "64", "--device", "cpu", "--budget-s", "0.01",
                 "--out", str(tmp_path / "q.jsonl")]) == 0
    assert "note: on this CPU" not in capsys.readouterr().err


def test_doctor_help_imports_no_lab():
    """Building the parser imports a command's lab only when that command runs: `doctor
    --help` loads nothing of the training, serving or tile labs (python -X importtime)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "a800lab", "doctor",
                           "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "usage:" in proc.stdout
    loaded = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()}
    labs = sorted(m for m in loaded if m.startswith(("a800lab.workloads.training",
                                                     "a800lab.workloads.serving",
                                                     "a800lab.workloads.tiles")))
    assert "a800lab.cli.serve" in loaded and not labs, labs
