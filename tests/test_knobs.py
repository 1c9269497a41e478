"""A parameter declared once as a spec field (core/knobs.py): the spec refuses with it, and the
command line, the panel, the tuner and the code to paste take a new lever from its field alone
(cudnn_benchmark was added to TrainSpec and the Trainer only); powers of two and required
fields are checked; bounds with an open end; a spec at a device's defaults."""

import argparse
from dataclasses import MISSING, dataclass

import pytest
import torch

from a800lab.cli.main import build_parser
from a800lab.core.knobs import Knob, check_knobs, knob, knobs, levers, on_device, tuner_axes
from a800lab.workloads.training.candidates import LEVERS
from a800lab.workloads.training.point import train_point
from a800lab.workloads.training.spec import TrainSpec
from a800lab.workloads.training.trainer import Trainer
from a800lab.workloads.training.tune import describe_candidate, training_snippet


@dataclass(frozen=True)
class Spec:
    count: int = knob(4, "how many", integer=True, lo=1, example="4")
    share: float = knob(0.5, "a share", lo=0.0, hi=1.0)
    mode: str = knob("a", "the mode", choices=("a", "b"), tune=("a", "b"), tune_gpu=("b",))
    flag: bool = knob(False, "a switch", choices=(False, True), lever=True, gpu=True)

    def __post_init__(self):
        check_knobs(self)


@pytest.mark.parametrize("given, says", [
    ({"count": 0}, "count=0 must be a positive int, e.g. 4"),
    ({"count": True}, "count=True must be a positive int"),
    ({"share": 1.5}, "share=1.5 must be a finite number from 0.0 to 1.0"),
    ({"share": float("nan")}, "share=nan must be a finite number from 0.0 to 1.0"),
    ({"mode": "c"}, "mode='c' is not a choice: use one of ('a', 'b')"),
    ({"flag": 1}, "flag=1 must be True or False"),
])
def test_a_spec_refuses_with_its_fields_declaration(given, says):
    with pytest.raises(ValueError, match="^" + says.replace("(", r"\(").replace(")", r"\)")):
        Spec(**given)


def test_the_declaration_gives_defaults_axes_and_help():
    assert Spec(share=1).share == 1.0 and isinstance(Spec(share=1).share, float)
    declared = knobs(Spec)
    assert declared["flag"].default_for("cpu") is False and declared["flag"].default_for("cuda")
    assert tuner_axes(Spec, "cpu") == {"mode": ["a", "b"]}
    assert tuner_axes(Spec, "cuda:0") == {"mode": ["b"]}
    assert levers(Spec) == ("flag",)
    assert declared["mode"].describe() == "the mode: a, b (default a)"
    assert declared["flag"].describe() == "a switch (default off on a CPU, on on a GPU)"


def _options(*words) -> dict:
    """dest -> action of the command `words`, from the parser built for it."""
    parser = build_parser(list(words))
    for word in words:
        parser = next(a for a in parser._actions
                      if isinstance(a, argparse._SubParsersAction)).choices[word]
    return {action.dest: action for action in parser._actions}


def test_a_lever_declared_in_the_spec_reaches_every_command_and_the_panel():
    assert "cudnn_benchmark" in levers(TrainSpec) and "cudnn_benchmark" in LEVERS  # tunable
    for words in (("sweep", "train"), ("tune", "train"), ("profile",)):
        option = _options(*words)["cudnn_benchmark"]
        assert option.choices == ["off", "on"] and "cuDNN" in option.help
    from a800lab.widgets import TrainingExplorer

    panel = TrainingExplorer(device="cpu")
    assert panel.params["cudnn_benchmark"].values == (False, True)


def test_the_lever_runs_is_restored_and_is_named_in_the_tuners_answer(monkeypatch):
    before, seen = torch.backends.cudnn.benchmark, set()
    loss = Trainer._loss

    def watched(self, *args, **kwargs):
        seen.add(torch.backends.cudnn.benchmark)
        return loss(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "_loss", watched)
    point = train_point(model="cnn", batch_size=4, cudnn_benchmark=True, train_steps=1,
                        budget_s=0.01, predict_memory=False, device="cpu")
    assert point["throughput"] > 0 and True in seen
    assert torch.backends.cudnn.benchmark == before
    config = {"precision": "fp32", "batch_size": 8, "accum_steps": 2, "cudnn_benchmark": True}
    assert describe_candidate(config).endswith(", cudnn_benchmark")
    code = training_snippet(config, optimizer="adamw", lr=1e-3, device="cuda")
    assert "torch.backends.cudnn.benchmark = True" in code
    assert "benchmark" not in training_snippet({**config, "cudnn_benchmark": False},
                                           optimizer="adamw", lr=1e-3, device="cuda")


def _refuse(device):
    raise AssertionError(f"asked what {device} runs for a field with nothing to try")


@dataclass(frozen=True)
class Shape:
    rows: int = knob(MISSING, "rows", integer=True, lo=1, example="1024")
    block: int | None = knob(None, "tile rows", integer=True, lo=16, pow2=True, example="64",
                             tune=(32, 64))
    warps: int = knob(4, "warps", integer=True, lo=1, hi=16, pow2=True, example="4")
    kind: str = knob("a", "kind", choices=("a", "b"), available=_refuse)

    def __post_init__(self):
        check_knobs(self)


@pytest.mark.parametrize("given, says", [
    ({"block": 48}, "block=48 must be a power of two >= 16, e.g. 64"),
    ({"block": 8}, "block=8 must be a power of two >= 16"),
    ({"warps": 3}, "warps=3 must be a power of two from 1 to 16, e.g. 4"),
    ({"warps": 32}, "warps=32 must be a power of two from 1 to 16"),
    ({"warps": True}, "warps=True must be a power of two"),
    ({"rows": None}, "rows=None must be a positive int, e.g. 1024"),
])
def test_powers_of_two_and_required_fields_are_checked(given, says):
    with pytest.raises(ValueError, match=says.replace("(", r"\(")):
        Shape(**{"rows": 8, **given})


def test_a_required_field_has_no_default_and_says_none():
    with pytest.raises(TypeError):
        Shape()  # rows is required
    assert Shape(8, 64, 16).block == 64 and Shape(8).block is None
    assert knobs(Shape)["rows"].describe() == "rows"


def test_tuner_axes_ask_the_device_only_for_fields_with_values_to_try():
    assert tuner_axes(Shape, "cuda:0") == {"block": [32, 64]}


def test_bounds_say_which_end_is_open():
    percentile = Knob(99.0, "percentile", lo=0, hi=100, bounds="()", example="99")
    assert percentile.check("percentile", 99.9) == 99.9
    for bad in (0, 100, 101.0):
        with pytest.raises(ValueError, match=rf"percentile={bad!r} must be a finite number in "
                                             r"\(0, 100\), e.g. 99"):
            percentile.check("percentile", bad)
    delay = Knob(0.0, "delay", lo=0, bounds="[", example="2")
    assert delay.check("delay", 0) == 0.0  # a float range from 0 that includes it
    with pytest.raises(ValueError, match="delay=-1 must be a finite number >= 0, e.g. 2"):
        delay.check("delay", -1)


@dataclass(frozen=True)
class _Devices:
    batch: int = knob(8, "batch", integer=True, lo=1, gpu=64)
    steps: int = knob(4, "steps", integer=True, lo=1)

    def __post_init__(self):
        check_knobs(self)


def test_on_device_fills_what_is_not_given_with_the_device_default():
    assert on_device(_Devices, "cpu") == _Devices(8, 4)
    assert on_device(_Devices, "cuda:0", steps=None) == _Devices(64, 4)
    assert on_device(_Devices, "cuda", steps=2) == _Devices(64, 2)
    with pytest.raises(ValueError, match="steps=0 must be a positive int"):
        on_device(_Devices, "cpu", steps=0)
