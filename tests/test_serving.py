"""The serving lab on a CPU: the inference point (checked against fp32, p50/p90/p99 from a
recorded count), a known latency distribution recovered, decode and its bytes, concurrent
streams, the G.9.3 function, bad inputs refused in the API and the CLI."""

import itertools
import json
import math
import statistics

import numpy as np
import pytest
import torch
from torch import nn

from a800lab.cli import main
from a800lab.core.results import read_records
from a800lab.core.timing import Timing
from a800lab.workloads.models.presets import preset
from a800lab.workloads.models.task import custom_task
from a800lab.workloads.serving.concurrency import concurrency_point
from a800lab.workloads.serving.decode import decode_point, step_bytes
from a800lab.workloads.serving.point import fp16_vs_fp32_latency, serve_point, time_requests
from a800lab.workloads.serving.spec import ServeSpec, check_serving_task, serving_unavailable
from a800lab.workloads.serving.tune import serving_snippet, tune_serve

pytestmark = pytest.mark.usefixtures("one_torch_thread", "quiet_cpu")


def small_model():
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 10))


def small_batch(n):
    x = torch.randn(n, 16)
    return x, x[:, :10].argmax(1)


class Rounding(nn.Module):
    """Right in fp32, wrong in bf16: x + 4096 - 4096 keeps 8 bits of x at best."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, x):
        return (x * self.scale + 4096) - 4096


class Flattening(nn.Module):
    """Its output's first dimension is not the batch."""

    def forward(self, x):
        return x.reshape(-1)


def test_percentiles_match_numpys():
    samples = tuple(float(v) for v in np.random.default_rng(0).lognormal(0, 1, 257))
    t = Timing(samples, 0, "cpu")
    for q in (0, 25, 50, 90, 99, 100):
        assert t.percentile_ms(q) == pytest.approx(np.percentile(samples, q))


def test_a_known_latency_distribution_is_recovered_within_5_percent():
    """Requests whose latencies follow a lognormal (p50 2 ms, p99 6.4 ms), drawn stratified
    and shuffled, timed through the harness with a clock they advance."""
    n, sigma = 1000, 0.5
    rng = np.random.default_rng(1)
    from statistics import NormalDist
    quantiles = [2.0 * math.exp(sigma * NormalDist().inv_cdf((i + 0.5) / n)) for i in range(n)]
    draws = itertools.cycle(rng.permutation(quantiles))
    now = [0.0]

    def request():
        now[0] += next(draws) / 1e3

    timing = time_requests(request, device="cpu", requests=n, budget_s=0.0,
                           clock=lambda: now[0])
    true_p50, true_p99 = 2.0, 2.0 * math.exp(sigma * NormalDist().inv_cdf(0.99))
    assert timing.percentile_ms(50) == pytest.approx(true_p50, rel=0.05)
    assert timing.percentile_ms(99) == pytest.approx(true_p99, rel=0.05)
    assert len(timing.samples_ms) == n


def test_an_inference_point_is_checked_then_timed_from_a_recorded_count():
    out = serve_point(model="transformer", size="tiny", batch_size=4, device="cpu",
                      requests=100, budget_s=0.05)
    assert out["rel_error"] == 0.0 and out["top1_agreement"] == 1.0
    assert out["requests"] == len(out["timing"].samples_ms) >= 100
    assert out["p50_ms"] <= out["p90_ms"] <= out["p99_ms"]
    assert out["throughput"] == pytest.approx(4 / (out["timing"].median_ms / 1e3))
    assert out["first_request_ms"] > 0 and "capture_s" not in out  # no graph on a CPU


def test_a_wrong_low_precision_output_is_recorded_as_wrong_and_not_timed():
    task = custom_task(Rounding, small_batch)
    out = serve_point(task=task, batch_size=8, precision="bf16", device="cpu", requests=100)
    assert out["outcome"] == "wrong" and "bf16 output off" in out["message"]
    assert "timing" not in out and out["rel_error"] > 0.05
    assert "timing" in serve_point(task=task, batch_size=8, device="cpu", requests=100,
                                   budget_s=0.01)  # fp32: right


@pytest.mark.parametrize("make, says", [
    (lambda: ServeSpec(batch_size=0), "batch_size=0 must be a positive int"),
    (lambda: ServeSpec(precision="fp8"), "precision='fp8' is not a serving precision"),
    (lambda: ServeSpec(precision="int4"), "precision='int4' is not a serving precision"),
    (lambda: tune_serve(0, device="cpu"), "p99_ms=0 must be a finite number > 0"),
    (lambda: tune_serve(-5.0, device="cpu"), "p99_ms=-5.0 must be a finite number > 0"),
    (lambda: check_serving_task(custom_task(Flattening, small_batch)),
     "its first dimension to be the batch"),
    (lambda: time_requests(lambda: None, device="cpu", requests=10), "requests=10 must be"),
])
def test_bad_inputs_are_refused_with_one_line_naming_the_value(make, says):
    with pytest.raises(ValueError) as caught:
        make()
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_configs_a_cpu_cannot_run_are_refused_with_the_reason():
    assert "needs a CUDA device" in serving_unavailable(ServeSpec(graphs=True), "cpu")
    assert "CUDA tensor-core mode" in serving_unavailable(ServeSpec(precision="tf32"), "cpu")
    assert "channels_last" in serving_unavailable(ServeSpec(channels_last=True), "cpu")
    assert "already replays CUDA graphs" in serving_unavailable(
        ServeSpec(compile="reduce-overhead", graphs=True), "cuda:0")


def test_decode_counts_the_bytes_a_step_reads_and_matches_the_full_forward():
    out = decode_point(size="tiny", batch_size=2, device="cpu", budget_s=0.05)
    model = preset("transformer", "tiny").make_model()
    embeddings = model.embed.weight.numel() + model.pos.numel()
    weights = sum(p.numel() for p in model.parameters()) - embeddings
    assert out["weight_bytes"] == 4 * weights
    context = out["prompt_tokens"] + (out["new_tokens"] + 1) / 2
    assert out["kv_bytes"] == 2 * 2 * 2 * context * 32 * 4  # k+v, 2 layers, batch 2, d=32
    assert out["rel_error"] < 1e-5 and out["throughput_unit"] == "tokens/s"
    assert out["throughput"] == pytest.approx(2 * out["new_tokens"] / out["ms_per_token"]
                                              / out["new_tokens"] * 1e3)
    bytes_ = step_bytes(model, 4, 10, 2)
    assert bytes_["bytes_per_step"] == bytes_["weight_bytes"] + bytes_["kv_bytes"]


def test_concurrent_streams_in_threads_answer_together():
    out = concurrency_point(streams=2, batch_size=4, device="cpu", requests=100)
    assert out["requests"] == 100 and out["throughput"] > 0 and out["wall_s"] > 0
    assert out["p50_ms"] <= out["p99_ms"] and out["mps_active"] is None


def test_fp16_vs_fp32_latency_of_your_model():
    out = fp16_vs_fp32_latency(small_model, small_batch, batch_size=1, device="cpu",
                               requests=100, budget_s=0.05)
    assert out["outcome"] == "ok", out["message"]
    assert out["ratio"] == pytest.approx(out["fp32"]["p50_ms"] / out["fp16"]["p50_ms"])
    assert out["ratio_spread"] >= 0 and out["rel_error"] < 1e-2
    assert [r.params["precision"] for r in out["records"]] == ["fp32", "fp16"]


def test_the_serving_snippet_answers_like_the_model():
    snippet = serving_snippet({"batch_size": 4, "precision": "bf16", "compile": "off",
                               "graphs": False}, "cpu", note="test")
    scope = {"make_model": small_model, "make_batch": small_batch}
    exec(compile(snippet, "snippet", "exec"), scope)  # noqa: S102 -- the code a user pastes
    x = small_batch(4)[0]
    assert scope["answer"](x).shape == (4, 10)
    graphs = serving_snippet({"batch_size": 4, "precision": "fp16", "graphs": True}, "cuda")
    compile(graphs, "graphs", "exec")
    assert "torch.cuda.graph(graph)" in graphs and "static_input[:n].copy_" in graphs


@pytest.mark.parametrize("model", ["mlp", "transformer", "cnn"])
@pytest.mark.parametrize("config", [
    {"precision": "fp32"}, {"precision": "bf16"},
    {"precision": "fp32", "channels_last": True}])
def test_the_snippet_runs_on_every_preset(model, config):
    """The code to paste, executed as pasted: token ids stay integers (an embedding refuses
    bf16 indices), floating inputs take the serving dtype; a smaller batch is answered too."""
    task = preset(model, "tiny")
    snippet = serving_snippet({"batch_size": 4, "compile": "off", "graphs": False, **config},
                              "cpu")
    scope = {"make_model": lambda: task.make_model(),
             "make_batch": lambda n: task.make_batch(n, torch.Generator().manual_seed(0))}
    exec(compile(snippet, "snippet", "exec"), scope)  # noqa: S102 -- the code a user pastes
    for n in (4, 3):
        x = scope["make_batch"](n)[0]
        out = scope["answer"](x)
        with torch.inference_mode():
            expected = task.make_model().eval()(x)
        assert out.shape == expected.shape
        assert (out.float() - expected).abs().max() <= 0.05 * expected.abs().max()


def test_thread_streams_warm_up_on_their_own_thread_before_the_timed_requests():
    """cuBLAS handles and cuDNN caches are per thread: each stream's first requests run on its
    own thread, before the start barrier, never among the timed ones."""
    import threading

    from a800lab.workloads.serving.concurrency import serve_stream
    from a800lab.workloads.serving.point import WARMUP_REQUESTS

    calls = []

    class Server:
        def request(self):
            calls.append(threading.current_thread().name)

    class Start:
        def wait(self, timeout):
            self.calls_before = len(calls)

    start = Start()
    worker = threading.Thread(target=lambda: serve_stream(Server(), 5, start, "cpu"),
                              name="stream-1")
    worker.start()
    worker.join()
    assert start.calls_before == WARMUP_REQUESTS
    assert calls == ["stream-1"] * (WARMUP_REQUESTS + 5)


def test_sweep_load_writes_records_resumes_and_refuses_bad_values(tmp_path, capsys):
    out = tmp_path / "load.jsonl"
    argv = ["sweep", "load", "--model", "mlp", "--rate", "300", "600", "--max-batch", "4",
            "--max-delay-ms", "0", "1", "--duration-s", "0.5", "--device", "cpu",
            "--threads", "1", "--out", str(out)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    records = read_records(out)
    assert [(r.params["rate_rps"], r.params["max_delay_ms"]) for r in records] == [
        (300.0, 0.0), (600.0, 0.0), (300.0, 1.0), (600.0, 1.0)]
    assert all(r.outcome == "ok" and r.workload == "load" and r.throughput_unit ==
               "requests/s" for r in records)
    lines = [line for line in err.splitlines() if "'rate_rps'" in line]
    assert len(lines) == 4 and all(" p50 " in line and " p99 " in line for line in lines)
    assert main(argv) == 0  # run again: resumed, nothing measured
    assert "0 points measured, 4 already in" in capsys.readouterr().err
    assert read_records(out) == records
    trace = tmp_path / "unsorted.txt"
    trace.write_text("0.2\n0.1\n")
    for bad, says in ((["--rate", "0"], "rate_rps=0.0 must"),
                      (["--rate", "-5"], "rate_rps=-5.0 must"),
                      (["--rate", "100", "--max-delay-ms", "-1"], "max_delay_ms=-1.0 must"),
                      (["--rate", "100", "--arrival", "gamma", "--burstiness", "0"],
                       "burstiness=0.0 must"),
                      (["--arrival", "trace", "--trace", str(tmp_path / "none.txt")],
                       "no such file"),
                      (["--arrival", "trace", "--trace", str(trace)], "comes before"),
                      (["--rate", "100", "--duration-s", "0"], "duration_s=0.0 must"),
                      (["--rate", "100", "--max-batch", "0"], "max_batch=0 must"),
                      ([], "give the offered rates")):
        assert main(["sweep", "load", "--model", "mlp", "--device", "cpu", *bad, "--out",
                     str(tmp_path / "x.jsonl")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err
    assert main(["sweep", "load", "--arrival", "bursty", "--rate", "100", "--out",
                 str(tmp_path / "x.jsonl")]) == 2  # the spec refuses it, in one line
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "arrival='bursty' is not a choice" in err[0]
    assert not (tmp_path / "x.jsonl").exists()


def test_sweep_serve_writes_records_and_bad_values_exit_2(tmp_path, capsys):
    out = tmp_path / "serve.jsonl"
    assert main(["sweep", "serve", "--batch-size", "1", "4", "--requests", "100",
                 "--budget-s", "0.02", "--device", "cpu", "--threads", "1",
                 "--out", str(out)]) == 0
    records = read_records(out)
    assert [r.params["batch_size"] for r in records] == [1, 4]
    assert all(r.outcome == "ok" and r.metrics["requests"] >= 100 for r in records)
    capsys.readouterr()
    bad = tmp_path / "bad_model.py"
    bad.write_text("import torch\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n"
                   "        return x.sum(0)\n\ndef make_model():\n    return M()\n\n"
                   "def make_batch(n):\n    return torch.randn(n, 4), torch.zeros(n)\n")
    for argv, says in [(["sweep", "serve", "--batch-size", "0"], "batch_size=0"),
                       (["sweep", "serve", "--precision", "fp7"], "precision='fp7'"),
                       (["sweep", "serve", "--user-model", str(bad)], "first dimension"),
                       (["sweep", "serve", "--graphs", "on"], "needs a CUDA device"),
                       (["tune", "serve", "--p99-ms", "0"], "p99_ms=0.0"),
                       (["tune", "serve", "--p99-ms", "-1"], "p99_ms=-1.0")]:
        assert main([*argv, "--device", "cpu", "--out", str(tmp_path / "x.jsonl")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err
    assert not (tmp_path / "x.jsonl").exists()


def test_sweep_decode_and_concurrency_write_records(tmp_path):
    decode, streams = tmp_path / "decode.jsonl", tmp_path / "streams.jsonl"
    assert main(["sweep", "decode", "--batch-size", "1", "--budget-s", "0.02", "--device",
                 "cpu", "--threads", "1", "--out", str(decode)]) == 0
    assert main(["sweep", "concurrency", "--streams", "1", "2", "--requests", "100",
                 "--device", "cpu", "--threads", "1", "--out", str(streams)]) == 0
    (rec,) = read_records(decode)
    assert rec.outcome == "ok" and rec.throughput_unit == "tokens/s"
    records = read_records(streams)
    assert [r.params["streams"] for r in records] == [1, 2]
    assert all(r.params["mode"] == "threads" and r.outcome == "ok" for r in records)
    json.dumps([r.metrics for r in records])  # plain JSON: nothing a record cannot hold
    assert statistics.fmean(r.metrics["requests"] for r in records) == 100


@pytest.mark.slow
def test_a_compiled_config_pays_its_compile_apart_from_the_latencies():
    """torch.compile's first compile takes ~30 s on 2 cores: run by hand (--run-slow)."""
    out = serve_point(batch_size=4, compile="default", device="cpu", requests=100,
                      budget_s=0.05)
    assert out["compile_s"] > 1 and out["recompiles"] == 0 and out["rel_error"] < 1e-4
    assert out["p99_ms"] * 1e-3 < out["compile_s"]  # the compile is not in any latency


@pytest.mark.slow
def test_concurrent_streams_in_spawned_processes():
    """Each stream's process imports torch (seconds): run by hand (--run-slow)."""
    out = concurrency_point(streams=2, batch_size=4, device="cpu", requests=100,
                            mode="processes")
    assert out["requests"] == 100 and out["throughput"] > 0 and out["mps_active"] is None


@pytest.mark.slow
def test_a_known_distribution_is_recovered_with_the_real_clock():
    """Busy-waiting requests (lognormal, p50 2 ms, p99 6.4 ms) timed with the real clock:
    within 5% on a quiet CPU; skipped when other work took the core (the verdict says so)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_serving_harness.py"
    spec = importlib.util.spec_from_file_location("bench_serving_harness", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    found = bench.recovery(400)
    if found["contended"]:
        pytest.skip(f"the CPU was contended: {found['contention'][0]}")
    assert abs(found["rel_error"][50]) < 0.05 and abs(found["rel_error"][99]) < 0.05, found
