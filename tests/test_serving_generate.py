"""Generation under load on a CPU: the per-slot decode step against the full forward, what the
two schedulers do step by step (a fake generator on a fake clock), static vs continuous on the
transformer preset, an overloaded point, bad inputs in the API and the CLI, resume, a user
generator and its faults, the figure."""

import math

import pytest
import torch

from a800lab.cli import main
from a800lab.core.cancel import Cancelled, CancelToken
from a800lab.core.results import read_records
from a800lab.workloads.serving.generate import (
    DRAIN_SHARE,
    generate_point,
    run_generation,
    token_range,
)
from a800lab.workloads.serving.kv import (
    TransformerGenerator,
    built,
    check_generator,
    preset_generator,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")
TINY = {"size": "tiny", "device": "cpu", "prompt_tokens": 2}


def tiny_generator():
    return preset_generator("tiny")


@pytest.mark.parametrize("size", ["tiny", "small"])
def test_the_per_slot_decode_matches_the_full_forward(size):
    def make():
        return preset_generator(size)

    reference = built(make, "cpu", torch.float32)
    gap = check_generator(built(make, "cpu", torch.float32), reference, "fp32", torch.float32,
                          "cpu")
    assert gap["rel_error"] < 1e-5 and "outcome" not in gap
    gap = check_generator(built(make, "cpu", torch.bfloat16), reference, "bf16",
                          torch.bfloat16, "cpu")
    assert 0 < gap["rel_error"] < 5e-2 and "outcome" not in gap


class OnePosition(TransformerGenerator):
    """Every slot decoded at the first slot's position: right for one length, wrong for more."""

    def decode(self, cache, tokens, lengths):
        return super().decode(cache, tokens, [lengths[0]] * len(lengths))


def test_a_decode_that_ignores_each_slots_length_is_wrong():
    reference = built(tiny_generator, "cpu", torch.float32)
    gen = built(lambda: OnePosition(preset_generator("tiny").model), "cpu", torch.float32)
    gap = check_generator(gen, reference, "fp32", torch.float32, "cpu")
    assert gap["outcome"] == "wrong" and "not timed" in gap["message"]


def test_the_check_covers_packing_the_slots(monkeypatch):
    """Slot 2 moved into slot 1 as the continuous scheduler packs them: a move lost is wrong."""
    from a800lab.workloads.serving import kv

    monkeypatch.setattr(kv, "move_slot", lambda cache, src, dst: None)
    make = tiny_generator
    gap = check_generator(built(make, "cpu", torch.float32), built(make, "cpu", torch.float32),
                          "fp32", torch.float32, "cpu")
    assert gap["outcome"] == "wrong"


class Clock:
    """A fake clock: each call moves it 1 us; sleep and the fake generator move it on."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        self.now += 1e-6
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class FakeGenerator:
    """Each prefill and decode step costs 1 ms on the clock; records each step's lengths."""

    context, vocab = 64, 4

    def __init__(self, clock):
        self.clock, self.steps = clock, []

    def prefill(self, cache, slot, prompt):
        self.clock.now += 1e-3
        return torch.zeros(self.vocab)

    def decode(self, cache, tokens, lengths):
        self.clock.now += 1e-3
        self.steps.append(list(lengths))
        return torch.zeros(len(lengths), self.vocab)


def _replay(scheduler, times, outputs, cancel=None):
    clock = Clock()
    gen = FakeGenerator(clock)
    prompts = [torch.zeros(3, dtype=torch.long)] * len(times)
    trace = run_generation(gen, torch.zeros(4, 1), prompts, outputs, times,
                           scheduler=scheduler, max_batch=4, end_s=10.0, device="cpu",
                           clock=clock, sleep=clock.sleep, cancel=cancel)
    return trace, gen.steps


def test_static_runs_a_batch_to_its_longest_and_continuous_refills_at_the_next_step():
    # two requests at 0 s (10 and 2 tokens), a third at 2.5 ms (2 tokens)
    times, outputs = [0.0, 0.0, 0.0025], [10, 2, 2]
    static, static_steps = _replay("static", times, outputs)
    cont, cont_steps = _replay("continuous", times, outputs)
    # static: the finished request keeps its slot, computed, its length frozen at 3 + 1
    assert static_steps[:9] == [[3 + i, 3 + min(i, 1)] for i in range(9)]
    assert static_steps[9:] == [[3]]  # the third waited for the whole batch
    # continuous: the third is admitted before the second step into the freed slot
    assert cont_steps[0] == [3, 3] and cont_steps[1] == [4, 3] and len(cont_steps[2]) == 1
    for trace in (static, cont):
        assert all(len(t) == n for t, n in zip(trace.token_s, outputs, strict=True))
        assert all(math.isfinite(e) for e in trace.end_s)
    ttft_static = static.token_s[2][0] - times[2]
    ttft_cont = cont.token_s[2][0] - times[2]
    assert ttft_static > 8e-3 > 2e-3 > ttft_cont  # 9 decode steps of the batch vs one


def test_a_cancel_stops_the_replay_between_steps():
    token = CancelToken()
    token.cancel()
    with pytest.raises(Cancelled):
        _replay("continuous", [0.0], [3], cancel=token)


def test_static_vs_continuous_on_the_transformer_preset():
    """The same schedule (seeded) at the same rate, output lengths 1-30: a static batch holds
    new arrivals until its longest request ends; continuous admits them at the next step."""
    got = {s: generate_point(**TINY, rate_rps=300, output_tokens="1:30", scheduler=s,
                             max_batch=8, duration_s=1.0) for s in ("static", "continuous")}
    for out in got.values():
        assert out["offered_rate"] == got["static"]["offered_rate"] > 0
        assert out["rel_error"] < 1e-5 and out["throughput_unit"] == "tokens/s"
        assert 0 < out["ttft_p50_ms"] <= out["ttft_p99_ms"] <= out["max_ms"]
        assert 0 < out["tpot_p50_ms"] <= out["tpot_p99_ms"]
        assert 0 < out["itl_p50_ms"] <= out["itl_p99_ms"]
        assert out["tokens_per_s"] > 0 and out["tokens_per_s_per_user"] > 0
        assert 1 <= out["mean_batch"] <= 8 and out["spread_is_noise"] is False
    static, cont = got["static"], got["continuous"]
    assert cont["ttft_p50_ms"] < static["ttft_p50_ms"] or \
        cont["tokens_per_s"] > static["tokens_per_s"], (static, cont)


def test_an_overloaded_point_is_saturated_and_ends_on_time():
    out = generate_point(**TINY, rate_rps=3000, output_tokens="10:20", scheduler="static",
                         duration_s=0.5)
    assert out["saturated"] and "still waiting" in out["why_saturated"]
    assert out["unanswered"] > 0 and out["requests"] > 1000
    assert out["wall_s"] < 0.5 * (1 + DRAIN_SHARE) + 0.5  # one step past the drain at most


def test_length_specs():
    assert token_range("prompt_tokens", 16) == (16, 16)
    assert token_range("prompt_tokens", "4:32") == (4, 32)
    assert token_range("prompt_tokens", "7") == (7, 7)


BAD_API = [
    ({"rate_rps": 0}, "rate_rps=0"),
    ({"rate_rps": -5}, "rate_rps=-5"),
    ({"arrival": "gamma", "burstiness": 0}, "burstiness=0"),
    ({"arrival": "lognormal"}, "arrival='lognormal'"),
    ({"duration_s": 0}, "duration_s=0"),
    ({"max_batch": 0}, "max_batch=0"),
    ({"scheduler": "fifo"}, "scheduler='fifo'"),
    ({"output_tokens": "0:4"}, "output_tokens='0:4'"),
    ({"output_tokens": "9:3"}, "output_tokens='9:3'"),
    ({"prompt_tokens": "a:b"}, "prompt_tokens='a:b'"),
    ({"prompt_tokens": 2.5}, "prompt_tokens=2.5"),
    ({"prompt_tokens": 20, "output_tokens": 20}, "20 + output_tokens up to 20 = 40 tokens: "
                                                 "longer than the tiny preset's context of 32"),
]


@pytest.mark.parametrize("given, says", BAD_API)
def test_bad_inputs_are_one_line_in_the_api(given, says):
    with pytest.raises(ValueError) as info:
        generate_point(**{**TINY, **given})
    assert says in str(info.value) and "\n" not in str(info.value)


def test_bad_traces_are_one_line_in_the_api(tmp_path):
    unsorted, empty = tmp_path / "unsorted.txt", tmp_path / "empty.txt"
    unsorted.write_text("0.1\n0.05\n")
    empty.write_text("# nothing\n")
    for trace, says in [(tmp_path / "none.txt", "no such file"), (unsorted, "sort the file"),
                        (empty, "holds no arrival times")]:
        with pytest.raises(ValueError, match=says):
            generate_point(**TINY, arrival="trace", trace=str(trace))


def _cli(tmp_path, *argv):
    return main(["sweep", "generate", "--model-size", "tiny", "--prompt-tokens", "2",
                 "--output-tokens", "1:8", "--device", "cpu", "--threads", "1", *argv,
                 "--out", str(tmp_path / "generate.jsonl")])


def test_bad_inputs_exit_2_with_one_line_before_anything_runs(tmp_path, capsys):
    unsorted = tmp_path / "unsorted.txt"
    unsorted.write_text("0.2\n0.1\n")
    for argv, says in [(["--rate", "0"], "rate_rps=0.0"), (["--rate", "-1"], "rate_rps=-1.0"),
                       (["--arrival", "gamma", "--burstiness", "0"], "burstiness=0.0"),
                       (["--duration-s", "0"], "duration_s=0.0"),
                       (["--max-batch", "0"], "max_batch=0"),
                       (["--scheduler", "fifo"], "scheduler='fifo'"),
                       (["--output-tokens", "0:4"], "output_tokens='0:4'"),
                       (["--prompt-tokens", "30", "--output-tokens", "8"], "38 tokens"),
                       (["--arrival", "trace", "--trace", str(tmp_path / "no.txt")],
                        "no such file"),
                       (["--arrival", "trace", "--trace", str(unsorted)], "sort the file")]:
        assert _cli(tmp_path, *argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("a800lab: error:") and says in err[0], err
    assert _cli(tmp_path, "--arrival", "lognormal") == 2  # the spec refuses it, in one line
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "arrival='lognormal' is not a choice" in err[0], err
    assert not (tmp_path / "generate.jsonl").exists()


def test_sweep_generate_writes_a_record_per_point_and_resumes(tmp_path, capsys):
    argv = ["--rate", "60", "--scheduler", "static", "continuous", "--duration-s", "0.4"]
    assert _cli(tmp_path, *argv) == 0
    err = capsys.readouterr().err
    assert err.count("TTFT p50") == 2 and err.count("TPOT p50") == 2
    first = read_records(tmp_path / "generate.jsonl")
    assert [r.params["scheduler"] for r in first] == ["static", "continuous"]
    assert all(r.outcome == "ok" and r.throughput_unit == "tokens/s" for r in first)
    assert _cli(tmp_path, *argv) == 0
    assert "0 points measured, 2 already in" in capsys.readouterr().err
    assert read_records(tmp_path / "generate.jsonl") == first


GOOD = """from a800lab.workloads.serving.kv import preset_generator

def make_generator():
    return preset_generator("tiny")
"""
FAULTY = GOOD.replace('    return preset_generator("tiny")\n', """    gen = preset_generator("tiny")
    gen.decode = decode
    return gen

def decode(cache, tokens, lengths):
    raise RuntimeError("no cache here")
""")


def test_a_user_generator_runs_and_its_faults_name_the_file(tmp_path, capsys):
    good, faulty = tmp_path / "good_gen.py", tmp_path / "faulty_gen.py"
    good.write_text(GOOD)
    faulty.write_text(FAULTY)
    namespace = {}
    exec(compile(GOOD, str(good), "exec"), namespace)
    out = generate_point(generator=namespace["make_generator"], device="cpu", rate_rps=50,
                         duration_s=0.4, prompt_tokens=2, output_tokens="1:8")
    assert out["rel_error"] < 1e-5 and out["tokens_per_s"] > 0
    exec(compile(FAULTY, str(faulty), "exec"), namespace)
    with pytest.raises(ValueError) as info:
        generate_point(generator=namespace["make_generator"], device="cpu", rate_rps=50,
                       duration_s=0.4, prompt_tokens=2, output_tokens="1:8")
    assert str(faulty) in str(info.value) and "line 9" in str(info.value)
    assert "RuntimeError: no cache here" in str(info.value)
    assert _cli(tmp_path, "--user-model", str(faulty)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "faulty_gen.py" in err[0] and "no cache here" in err[0], err
    assert _cli(tmp_path, "--user-model", str(good.with_name("none.py"))) == 2
    assert "no such file" in capsys.readouterr().err


def test_the_figure_draws_both_schedulers_the_bound_and_saturated_points(tmp_path):
    from a800lab import load_results
    from a800lab.figures.serving_generate import generation_figure

    assert _cli(tmp_path, "--rate", "60", "4000", "--duration-s", "0.3") == 0
    df = load_results(tmp_path / "generate.jsonl")
    fig = generation_figure(df)
    left, right = fig.axes
    gids = [line.get_gid() for line in right.get_lines()]
    assert gids.count("tpot_p50_ms") == 2 and gids.count("tpot_p99_ms") == 2
    assert "bound_ms_measured" in gids or df["bound_ms_measured"].isna().all()
    assert df["saturated"].any() and "saturated" in gids
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any("static" in t for t in labels) and any("continuous" in t for t in labels)
    assert "CPU" in fig._suptitle.get_text()
    generation_figure(df.iloc[0:0])  # nothing measured yet: says so, no error
