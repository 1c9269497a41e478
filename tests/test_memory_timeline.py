"""torch's memory profiler on one training step: its categories against the lab's own count,
and the one line a torch whose private profiler changed gets."""

import pytest
import torch
import torch.profiler._memory_profiler as torch_memory_profiler

from a800lab.cli import main
from a800lab.workloads.models.presets import preset
from a800lab.workloads.training.memory import StepMemory
from a800lab.workloads.training.memory_timeline import step_memory_timeline
from a800lab.workloads.training.spec import TrainSpec
from a800lab.workloads.training.trainer import Trainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_torchs_categories_agree_with_the_labs_own_count():
    trainer = Trainer(TrainSpec(model="mlp", batch_size=8), preset("mlp", "tiny"), "cpu")
    trainer.train(1)  # Adam's state exists, as in every step after the first
    pool = trainer.pool()
    counted = trainer.counted_cycle(pool, StepMemory("cpu"))
    timeline = step_memory_timeline(trainer, pool, "cpu")
    largest = timeline.largest
    assert largest("parameter") == counted.param_bytes > 0  # a CPU allocator does not round
    assert largest("gradient") == counted.grad_bytes
    assert largest("optimizer_state") == counted.optimizer_state_bytes
    assert counted.data_bytes <= largest("input") <= counted.data_bytes + 64
    # at backward's start the live activations are what autograd saved (the lab's count) plus
    # the model's output and the loss (live, not saved): logits 8 x 10 fp32, two fp32 scalars
    by = timeline.bytes_by_category
    backward = next(i for i, g in enumerate(by["gradient"]) if g or by["autograd_detail"][i])
    assert by["activation"][backward - 1] == counted.activation_bytes + 8 * 10 * 4 + 2 * 4
    # the count at phase boundaries misses what lives inside a phase (the optimizer's own
    # temporaries, uncategorised by torch): the profiler's peak is the true one
    assert timeline.peak_bytes >= counted.peak_bytes
    assert timeline.peak_bytes == sum(timeline.at_peak.values())
    assert timeline.times_ms[0] == 0 and timeline.peak_ms <= timeline.times_ms[-1]
    assert timeline.summary().startswith("memory peak ")


def test_a_torch_whose_memory_profiler_changed_is_told_in_one_line(tmp_path, monkeypatch,
                                                                      capsys):
    monkeypatch.delattr(torch_memory_profiler, "MemoryProfileTimeline")
    assert main(["profile", "--model", "mlp", "--batch-size", "4", "--steps", "1",
                 "--warmup-steps", "1", "--memory", "--device", "cpu",
                 "--out", str(tmp_path)]) == 2
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert said.startswith(f"a800lab: error: torch {torch.__version__} changed its private "
                           "memory profiler (torch.profiler._memory_profiler: ImportError")
    assert "install one of those, or profile without the memory timeline" in said
