"""The claim register: every checkable statement of the tuning guide (and the datasheet checks
beside it), in the lab's words, with the guide's figure, the lab's reading of it, the method
and what decides the verdict. The single source of the report's rows, chapter 11's table and
the README's list of claims.

    from a800lab.report.register import REGISTER, CLAIMS, register_markdown
    c = CLAIMS["tile_shape"]
    c.stated, c.figure, c.reading       # the guide's words, "2.5x", what is compared with what
    c.judge                             # the judging function's name (report.verdicts.JUDGES)
    print(register_markdown())          # the README table (`python -m a800lab report --register`)

A Claim is data: swapping or extending a claim's method is a new entry (or a new `judge`) and
its judging function in report.verdicts' JUDGES; the battery's steps name the claims they
serve. `about` names the hardware a claim is about; a claim with `cpu_answers` False never
holds or fails on a CPU (a800lab.report.claims.METHOD_ON_CPU). A claim with `not_measurable`
set gets that reason as its verdict, on every machine.
"""

from __future__ import annotations

from .claims import Claim
from .guide import GUIDE_CLAIMS


def _datasheet(id_, stated, figure, chapter, reading, decides, judge, low, about, other="",
               source="NVIDIA's datasheets"):
    return Claim(id_, source, "beside the guide", stated, figure, chapter, reading, other,
                 "the report's battery (see reading)", decides, judge, low, None, "x", about)


_TC = "tensor cores"
CHECKS = (
    _datasheet("tf32_speed", "TF32 runs float32 matmuls about 8x faster than fp32 (A100: 156 vs "
               "19.5 dense TFLOP/s)", "8x", "03",
               "cuBLAS (torch.matmul) at 8192^3: TF32 over IEEE fp32 TFLOP/s",
               "holds if the ratio reaches 8x within noise", "tf32_speed", 8.0, _TC),
    _datasheet("tf32_accuracy", "TF32 trains at no cost in accuracy", "", "03",
               "held-out loss of the medium Transformer after the same steps, TF32 against IEEE "
               "fp32, two data seeds each; a float32 matmul probe under each run's settings "
               "checks that TF32 engaged",
               "holds if TF32's held-out loss is within the spread of the two seeds of fp32's "
               "(or lower); a run where TF32 did not engage has failed", "tf32_accuracy", None,
               _TC, other="TF32's matmul error vs float64 is shown beside: 100-1000x fp32's by "
               "design, which is why the claim is judged on the loss reached",
               source="NVIDIA's datasheets"),
    _datasheet("half_speed", "bf16 and fp16 double TF32's matmul rate", "2x", "03",
               "cuBLAS at 8192^3: bf16 and fp16 over TF32 TFLOP/s",
               "holds if both reach 2x within noise", "half_speed", 2.0, _TC),
    _datasheet("fp8_speed", "fp8 doubles bf16's matmul rate (Hopper)", "2x", "03",
               "torch._scaled_mm at 8192^3: fp8 e4m3 over bf16 TFLOP/s",
               "holds if it reaches 2x within noise", "fp8_speed", 2.0, _TC),
    _datasheet("sparsity_speed", "2:4 structured sparsity doubles the matmul rate", "2x", "03",
               "8192^3 fp16: the 2:4-sparse matmul's time against the dense one's on the same "
               "pruned matrix", "holds if the speed-up reaches 2x within noise",
               "sparsity_speed", 2.0, _TC),
    Claim("max_batch", "the lab", "beside the guide", "the memory model predicts the largest "
          "micro-batch that fits", "", "06",
          "the max-batch finder's verified largest micro-batch against the memory model's "
          "prediction of its peak, per preset and precision", "",
          "the report's max_batch step", "holds if the prediction is within 10% of the verified "
          "peak for every preset and precision measured", "max_batch", 0.10, None, "",
          "GPU memory (on a CPU the peak is the model's own counted bytes)"),
)

REGISTER: tuple[Claim, ...] = GUIDE_CLAIMS + CHECKS
CLAIMS: dict[str, Claim] = {c.id: c for c in REGISTER}
if len(CLAIMS) != len(REGISTER):
    raise RuntimeError("two register entries share an id")


def register_rows() -> list[dict]:
    """One row per claim: id, source, section, the guide's figure and words, the reading, what
    decides it (or why nothing can), and the chapter."""
    return [{"id": c.id, "source": c.source, "section": c.section, "figure": c.figure,
             "stated": c.stated, "reading": c.reading or "—",
             "decides": c.decides or f"not measurable: {c.not_measurable}",
             "chapter": c.chapter} for c in REGISTER]


def register_markdown() -> str:
    """The register as a Markdown table (the README's list of claims)."""
    def cell(text: str) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    head = ("| claim | where | the guide says | the lab's reading | decided by | chapter |\n"
            "|---|---|---|---|---|---|")
    rows = [f"| `{cell(r['id'])}` | {cell(r['source'])}: {cell(r['section'])} | "
            f"{cell(r['stated'])} | {cell(r['reading'])} | {cell(r['decides'])} | "
            f"{r['chapter']} |" for r in register_rows()]
    return "\n".join([head, *rows])


def register_table():
    """The register as a pandas DataFrame (chapter 11)."""
    import pandas as pd

    return pd.DataFrame(register_rows()).set_index("id")
