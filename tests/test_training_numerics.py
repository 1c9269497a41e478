"""The training pieces the report's claims stand on: PyTorch's default fp32 beside strict fp32,
the GPT-2-small and ResNet-50 presets, the guide's accumulation snippet, TF32's probe, and
embedding tables in fp16."""

from __future__ import annotations

import pytest
import torch

from a800lab.core import backends
from a800lab.core.precision import tf32_settings
from a800lab.workloads.models import presets as models
from a800lab.workloads.models.presets import preset
from a800lab.workloads.training.numerics import embedding_point, held_out_point
from a800lab.workloads.training.spec import TrainSpec, canonical_precision, precision_context
from a800lab.workloads.training.trainer import accumulation_gaps

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_fp32_default_is_pytorchs_own_settings_and_fp32_is_strict():
    before = tf32_settings()
    with precision_context("fp32_default"):
        inside = tf32_settings()
        assert (inside["matmul_fp32_precision"], inside["conv_fp32_precision"]) == ("ieee",
                                                                                   "tf32")
        with precision_context("fp32"):
            strict = tf32_settings()
            assert (strict["matmul_fp32_precision"], strict["conv_fp32_precision"]) == (
                "ieee", "ieee")
    assert tf32_settings() == before
    assert canonical_precision("default") == "fp32_default"
    assert TrainSpec(precision="fp32_default").autocast_dtype is None


def test_the_gpt2_small_shape_and_its_held_out_batch():
    task = preset("transformer", "gpt2_small")
    with torch.device("meta"):
        model = task.make_model()
    params = sum(p.numel() for p in model.parameters())
    assert 160e6 < params < 165e6            # GPT-2 small's 124M plus an untied 50257 x 768 head
    assert model.embed.num_embeddings == 50257 and len(model.blocks) == 12
    assert task.eval_batch == 8 and task.lr == 3e-4
    assert preset("transformer", "tiny").eval_batch == 256
    x, y = preset("transformer", "tiny").make_batch(2, torch.Generator().manual_seed(0))
    assert torch.equal((x[:, 2:] - x[:, :-2]) % 32, torch.ones_like(x[:, 2:]))   # the task
    with pytest.raises(ValueError, match="unknown size 'gpt2_small' for mlp"):
        preset("mlp", "gpt2_small")


def test_resnet50_without_torchvision_says_what_to_install(monkeypatch):
    monkeypatch.setattr(models, "torchvision_reason", lambda: "torchvision is not installed: "
                        "pip install 'a800lab[resnet]'")
    with pytest.raises(ValueError, match=r"resnet50 comes from torchvision.*a800lab\[resnet\]"):
        preset("resnet50", "224")
    with pytest.raises(ValueError, match="unknown size 'tiny' for resnet50"):
        preset("resnet50", "tiny")


def test_torchvision_is_detected_once_and_says_why():
    import importlib.util

    reason = backends.torchvision_reason()
    hits = backends.torchvision_reason.cache_info().hits
    backends.torchvision_reason()
    assert backends.torchvision_reason.cache_info().hits == hits + 1   # asked once, kept
    if importlib.util.find_spec("torchvision") is None:
        assert reason.startswith("torchvision is not installed: pip install 'a800lab[resnet]'")


def test_the_guides_snippet_applies_one_micro_batch_and_the_loop_matches_one_batch():
    gaps = accumulation_gaps(preset("mlp"), 8, 4)
    assert gaps["accumulation_gap"] < 1e-5
    assert gaps["snippet_gap"] > 0.3            # one micro-batch's gradient / 4, not the sum


def test_the_tf32_probe_reads_ieee_fp32_on_a_cpu():
    point = held_out_point("fp32", size="tiny", batch_size=8, train_steps=3, device="cpu")
    assert point["matmul_probe_error"] < 1e-5 and point["eval_loss"] > 0
    assert len(point["time_ms"]) == 3 and point["steps_trained"] == 3
    with pytest.raises(ValueError, match="tf32"):
        held_out_point("tf32", device="cpu")


def test_fp16_tables_lose_updates_with_fp32_state_and_diverge_with_fp16_state():
    """AdamW's state in fp32 isolates the storage: the fp16 table keeps its values where the
    fp32 update rounds away; plain AdamW on an fp16 table (its state and eps in fp16) diverges,
    a different failure."""
    kwargs = {"size": "tiny", "batch_size": 16, "train_steps": 6, "device": "cpu"}
    kept16 = embedding_point("fp16", optimizer_state="fp32", **kwargs)
    kept32 = embedding_point("fp32", optimizer_state="fp32", **kwargs)
    assert not kept16["diverged"] and kept16["eval_loss"] is not None
    assert kept16["lost_update_share"] > kept32["lost_update_share"] == 0.0
    assert kept16["lost_update_share"] > 0.01
    plain16 = embedding_point("fp16", optimizer_state="fp16", **kwargs)
    assert plain16["diverged"] and plain16["eval_loss"] is None and "diverged" in \
        plain16["message"]
    with pytest.raises(ValueError, match="GradScaler refuses fp16 gradients"):
        embedding_point("fp16", precision="fp16", **kwargs)
    with pytest.raises(ValueError, match="embedding='bf8'"):
        embedding_point("bf8", **kwargs)
    with pytest.raises(ValueError, match="optimizer_state='bf16'"):
        embedding_point("fp16", optimizer_state="bf16", **kwargs)
