"""The step's kernel levers: compile mode, optimizer implementation, SDPA back end and
channels_last: validated, refused with the reason where they cannot run, and really applied."""

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from a800lab.workloads.models import levers
from a800lab.workloads.models.levers import CompileWatch, lever_unavailable
from a800lab.workloads.models.presets import preset
from a800lab.workloads.models.task import custom_task
from a800lab.workloads.training.point import train_point
from a800lab.workloads.training.spec import TrainSpec
from a800lab.workloads.training.trainer import Trainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("field, value", [("compile", "on"), ("optimizer_impl", "apex"),
                                          ("attention", "fast"), ("channels_last", "yes")])
def test_bad_lever_values_name_the_choices(field, value):
    with pytest.raises(ValueError, match=re.escape(f"{field}={value!r}")):
        TrainSpec(**{field: value})


@pytest.mark.parametrize("fields, says", [
    ({"compile": "reduce-overhead"}, "CUDA graphs, which need a CUDA device"),
    ({"model": "transformer", "attention": "efficient"}, "on CUDA only; on a CPU use 'math'"),
    ({"model": "transformer", "attention": "cudnn"}, "on CUDA only"),
    ({"model": "mlp", "attention": "flash"}, "the mlp preset has no attention"),
    ({"model": "transformer", "channels_last": True}, "the transformer preset has none"),
])
def test_levers_a_cpu_or_a_preset_cannot_use_are_refused_with_the_reason(fields, says):
    assert says in lever_unavailable(TrainSpec(**fields), "cpu")


def test_levers_that_can_run_here_are_not_refused():
    for fields in ({"model": "transformer", "attention": "flash"}, {"compile": "default"},
                   {"model": "cnn", "channels_last": True}, {"optimizer_impl": "fused"},
                   {"model": "custom", "attention": "math", "channels_last": True}):
        assert lever_unavailable(TrainSpec(**fields), "cpu") == ""


@pytest.mark.parametrize("impl, flag, value", [("for-loop", "foreach", False),
                                               ("foreach", "foreach", True),
                                               ("fused", "fused", True)])
def test_the_optimizer_implementation_reaches_the_optimizer(impl, flag, value):
    for optimizer in ("adamw", "sgd"):
        trainer = Trainer(TrainSpec(optimizer=optimizer, optimizer_impl=impl), preset("mlp"),
                          "cpu")
        assert trainer.optimizer.defaults[flag] is value
        trainer.cycle(trainer.batches())  # and it steps


def test_channels_last_lays_out_the_weights_and_the_images():
    trainer = Trainer(TrainSpec(model="cnn", batch_size=4, channels_last=True), preset("cnn"),
                      "cpu")
    conv = trainer.model.stem[0].weight
    images, _ = trainer.batch()
    assert conv.is_contiguous(memory_format=torch.channels_last)
    assert images.is_contiguous(memory_format=torch.channels_last) and not \
        images.is_contiguous()
    point = train_point(model="cnn", batch_size=4, channels_last=True, train_steps=2,
                        budget_s=0.02, predict_memory=False)
    assert point["throughput"] > 0


def test_a_forced_attention_backend_runs_the_transformer():
    for backend in ("math", "flash"):
        point = train_point(model="transformer", batch_size=4, attention=backend,
                            train_steps=2, budget_s=0.02, predict_memory=False)
        assert point["throughput"] > 0 and point["loss"] > 0


class ThreeDAttention(nn.Module):
    """Self-attention on 3-D (batch, tokens, features) tensors: SDPA's fused CPU kernel
    refuses those, its math back end does not."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return self.head(F.scaled_dot_product_attention(q, k, v).mean(1))


def test_a_backend_that_refuses_the_models_shapes_says_why_before_measuring():
    task = custom_task(ThreeDAttention, lambda n: (torch.randn(n, 5, 8),
                                                   torch.randint(0, 4, (n,))))
    with pytest.raises(ValueError, match=r"attention='flash' cannot run this model's attention"
                                         r".*4 dimensional"):
        train_point(task=task, batch_size=4, attention="flash", train_steps=1,
                    predict_memory=False)
    assert train_point(task=task, batch_size=4, attention="math", train_steps=1,
                       budget_s=0.02, predict_memory=False)["throughput"] > 0


def test_a_refused_lever_is_a_clear_error_of_the_point():
    with pytest.raises(ValueError, match="reduce-overhead"):
        train_point(model="mlp", compile="reduce-overhead", device="cpu")


def test_compile_watch_separates_the_compile_from_recompiles(monkeypatch):
    counts = iter([5, 7, 8])  # before the first step, after it, at the end
    monkeypatch.setattr(levers, "compiled_graph_count", lambda: next(counts))
    monkeypatch.setattr(levers, "graph_break_count", lambda: 0)
    watch = CompileWatch("default")
    watch.first_step_done()
    got = watch.metrics([2.5, 0.01, 0.03, 0.02])
    assert got == {"compile_s": pytest.approx(2.5 - 0.02), "compiled_graphs": 2,
                   "recompiles": 1, "graph_breaks": 0}
    assert CompileWatch("off").metrics([1.0]) == {}


@pytest.mark.slow
def test_a_compiled_point_reports_its_compile_apart_from_its_step_time():
    # torch.compile on a CPU: ~20 s the first time on 2 cores (Inductor caches on disk after)
    point = train_point(model="mlp", batch_size=8, compile="default", train_steps=3,
                        budget_s=0.05, predict_memory=False)
    assert point["compiled_graphs"] >= 1 and point["recompiles"] == 0
    assert point["compile_s"] > 0 and point["timing"].median_ms < 1e3 * point["compile_s"]
