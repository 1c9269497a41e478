"""Facts the chapters state, checked against the code and torch: the Transformer task chapter
04 describes is the one the preset generates, fp16's and bf16's underflow boundaries, the SMs of
MIG's largest A800 profile, and chapter 08's public bus-bandwidth figure with its source and
factor."""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from a800lab.workloads.comm.collectives import bus_factor
from a800lab.workloads.models.presets import preset

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def text(chapter: str) -> str:
    """A chapter's markdown, lines joined (sentences wrap across lines)."""
    nb = json.loads(next(NOTEBOOKS.glob(f"{chapter}-*.ipynb")).read_text(encoding="utf-8"))
    return " ".join(" ".join("".join(c["source"]).split()) for c in nb["cells"]
                    if c["cell_type"] == "markdown")


def rounds(value: float, dtype: torch.dtype) -> float:
    return torch.tensor(value, dtype=torch.float64).to(dtype).item()


def test_chapter_04_describes_the_transformer_task_the_preset_generates():
    task = preset("transformer", "tiny")
    rule = re.search(r"x\[t\+1\] = [^ ]+ \+ [^ ]+", task.description).group(0)   # the code's
    assert rule == "x[t+1] = x[t-1] + 1"
    tokens, targets = task.make_batch(4, torch.Generator().manual_seed(0))
    assert torch.equal(targets[:, 1:], (tokens[:, :-1] + 1) % 32)   # target t = token t-1, +1
    assert f"`{rule} mod vocab`" in text("04")
    assert "x[t] + x[t-1]" not in text("04")


def test_fp16_rounds_2_to_the_minus_25_to_zero_and_the_chapters_say_at_or_below():
    assert rounds(2.0**-25, torch.float16) == 0.0          # a tie, to the even neighbour
    assert rounds(2.0**-25 * 1.001, torch.float16) == 2.0**-24
    for chapter in ("03", "05"):
        assert "at or below half of it, 2^-25" in text(chapter), chapter
        assert "values below half of it, 2^-25" not in text(chapter), chapter
    assert "A gradient at or below 2^-25 rounds to zero" in text("05")


def test_bf16_underflows_below_2_to_the_minus_133_not_where_fp32_does():
    assert rounds(2.0**-133, torch.bfloat16) == 2.0**-133 and rounds(2.0**-134,
                                                                   torch.bfloat16) == 0.0
    assert rounds(2.0**-140, torch.float32) == 2.0**-140        # fp32 keeps it
    assert "bf16 underflows below 2^-133" in text("03")
    assert "nothing overflows or underflows that fp32 would keep" not in text("03")
    assert "its subnormals end at 2^-133 (fp32's at 2^-149)" in text("05")


def test_mig_7g_80gb_exposes_98_sms_in_chapter_01():
    assert "even `7g.80gb`, all seven slices as one instance, exposes 98 of the A800's 108 SMs" \
        in text("01")
    assert "is a fraction of 108" not in text("01")


def test_chapter_08s_public_busbw_names_its_source_and_factor():
    chapter = text("08")
    assert "Hazuyuki/chiplet-network-sim" in chapter and "section 3.2" in chapter
    algbw = 2**30 / 12.37e-3 / 1e9
    assert f"{algbw:.1f} GB/s" in chapter                        # 86.8
    assert bus_factor("all_reduce", 8) == 1.75 and "2(n-1)/n = 2·7/8 = 1.75" in chapter
    assert f"about {round(algbw * 1.75)} GB/s" in chapter          # 152
    assert "Hazuyuki/chiplet-network-sim" in text("11")            # chapter 11 quotes it too
