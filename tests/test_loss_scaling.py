"""The loss-scaling lab: fp16's range, gradients against it, the scaler vs none, fp32-kept ops."""

import math

import pytest
import torch

from a800lab.workloads.models.presets import preset
from a800lab.workloads.training.loss_scaling import (
    FP16_MAX,
    autocast_dtypes,
    compare_scaling,
    fp16_fractions,
    gradient_sample,
    log2_histogram,
    norm_overflow,
    regression_task,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_fp16_range_fractions():
    values = torch.tensor([2.0**-30, 2.0**-20, 1.0, 1e5, 0.0], dtype=torch.float64)
    plain = fp16_fractions(values)
    assert (plain["underflow"], plain["subnormal"], plain["overflow"]) == (0.25, 0.25, 0.25)
    assert plain["zero"] == 0.2 and plain["count"] == 5
    scaled = fp16_fractions(values, scale=2.0**16)  # 2^-14, 2^-4, 65536 (> 65504), 6.6e9
    assert (scaled["underflow"], scaled["subnormal"], scaled["overflow"]) == (0.0, 0.0, 0.5)
    # the boundaries are fp16's own: what rounds to zero does, what rounds to inf does; 2^-25,
    # half the smallest subnormal, is a tie that rounds to the even neighbour, 0, and 65519
    # still rounds to 65504
    for value in (2.0**-25, 2.0**-25 * 1.001, 2.0**-24, 65519.0, 65520.0):
        as_fp16 = torch.tensor(value, dtype=torch.float64).half()
        counted = fp16_fractions(torch.tensor([value], dtype=torch.float64))
        assert (as_fp16 == 0) == (counted["underflow"] == 1.0), value
        assert math.isinf(as_fp16) == (counted["overflow"] == 1.0), value
    for value, kind in ((2.0**-26, "underflow"), (2.0**-24, "subnormal"), (FP16_MAX, None)):
        as_fp16 = torch.tensor(value, dtype=torch.float64).half()
        assert (as_fp16 == 0) == (kind == "underflow") and math.isfinite(as_fp16)


def test_log2_histogram():
    edges, counts = log2_histogram(torch.tensor([0.0, 2.0**-3, 2.0**-2.5, 8.0, 1e-30]),
                                   lo=-10, hi=10)
    assert edges[0] == -10 and edges[-1] == 10 and sum(counts) == 4  # the zero is left out
    assert counts[edges.index(-3)] == 2 and counts[edges.index(3)] == 1 and counts[0] == 1


def test_small_regression_gradients_underflow_without_a_scale():
    sample = gradient_sample(regression_task(), steps=5, device="cpu")
    assert set(sample.activations) >= {"0", "2", "4"} and "4.weight" in sample.params
    plain = fp16_fractions(sample.values("activations"))
    scaled = fp16_fractions(sample.values("activations"), scale=2.0**16)
    assert plain["underflow"] > 0.1 and scaled["underflow"] < 0.01
    assert scaled["overflow"] == 0


def test_fp16_without_a_scaler_loses_gradients_the_scaler_keeps():
    runs = compare_scaling(regression_task(), steps=12, device="cpu")
    assert list(runs) == ["fp32", "fp16, no scaler", "fp16 + GradScaler"]
    lost = runs["fp16, no scaler"][-1]["zero_grad_fraction"]
    kept = runs["fp16 + GradScaler"][-1]["zero_grad_fraction"]
    assert lost > 0.1 and kept < 0.01
    assert [h["scale"] for h in runs["fp16 + GradScaler"]] == [2.0**16] * 12
    fp32, scaled = runs["fp32"][-1]["loss"], runs["fp16 + GradScaler"][-1]["loss"]
    assert scaled == pytest.approx(fp32, rel=0.05)


def test_autocast_keeps_embeddings_and_the_loss_in_fp32():
    task = preset("transformer")
    inputs, targets = task.make_batch(2, torch.Generator())
    rows = autocast_dtypes(task.make_model(), inputs, "bf16", loss_fn=task.loss_fn,
                           targets=targets, device="cpu")
    dtype = {r["module"]: r["output_dtype"] for r in rows}
    assert dtype["embed"] == "float32" and dtype["(loss)"] == "float32"
    assert dtype["blocks.0.qkv"] == "bfloat16" and dtype["head"] == "bfloat16"
    with pytest.raises(ValueError, match="autocast runs in 'fp16' or 'bf16'"):
        autocast_dtypes(task.make_model(), inputs, "fp32", device="cpu")


def test_a_hand_written_norm_overflows_in_fp16_unless_kept_in_fp32():
    rows = {r["variant"]: r for r in norm_overflow(300.0, device="cpu")}
    assert rows["pure fp16"]["rel_error"] > 0.5  # sum of x^2 overflowed: the output collapsed
    assert rows["fp16, norm kept in fp32"]["rel_error"] < 1e-3
    assert rows["pure bf16"]["rel_error"] < 0.02  # bf16 has fp32's range
    calm = {r["variant"]: r for r in norm_overflow(10.0, device="cpu")}
    assert calm["pure fp16"]["rel_error"] < 1e-2
