"""The tuning guide's claims that `a800lab report` tests, the thresholds its verdicts use, and
the verdict record itself.

    from a800lab.report.claims import CLAIMS, Verdict, holds_ratio
    CLAIMS["mp_memory"].text          # "mixed precision saves 40% memory"
    CLAIMS["mp_memory"].threshold     # the rule the verdict applies, in words
    holds_ratio(2.1, 2.5)             # True: 2.1 reaches 80% of the claimed 2.5x

A verdict is one of HOLDS ("holds here"), FAILS ("does not hold here"), UNTESTABLE ("cannot be
tested on this machine", always with the reason) and NOT_MEASURED (the time budget ran out or the
run was stopped: run the same command again to resume). Its `scope` says where the number came
from: a GPU by name, or "on this CPU", where only a claim's method can be checked (the CPU
stand-in of the tile kernel, counted tensor bytes) and the result is never a GPU result.

Thresholds (also written into every report):
- a speed-up or saving claim ("2.5x", "40%") holds when the measured figure reaches RATIO_SHARE
  (80%) of the claimed one, or of a range's low end: cards of one model differ by up to ~10% in
  sustained clocks and power, and short timings by a few %; a claim that falls short by more
  than a fifth is wrong for planning. A figure above the claimed range also holds (the effect is
  there, larger) and the verdict says so;
- "% of peak" claims hold within PEAK_SLACK_POINTS (5) percentage points below the claimed low
  end, against the datasheet's dense peak;
- "no cost in accuracy" holds when the error vs float64 is within NO_COST_FACTOR (2x) of fp32's,
  the spread of that error over random inputs;
- gradient accumulation "matches the large batch" when the gradients differ by at most
  ACCUMULATION_GAP (1e-5 of the largest gradient; fp32 rounding alone gives ~1e-7, batch norm
  ~1e-2) and its peak memory is below the large batch's;
- the memory model predicts the largest batch's peak within MODEL_ERROR (10%, the tolerance the
  max-batch finder itself trusts it to);
- loading "overlaps compute" when workers, pinned memory and non_blocking copies cut the
  device's idle fraction at least by half (OVERLAP_CUT).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

HOLDS = "holds here"
FAILS = "does not hold here"
UNTESTABLE = "cannot be tested on this machine"
NOT_MEASURED = "not measured yet"
STATUSES = (HOLDS, FAILS, UNTESTABLE, NOT_MEASURED)

RATIO_SHARE = 0.8
PEAK_SLACK_POINTS = 5.0
NO_COST_FACTOR = 2.0
ACCUMULATION_GAP = 1e-5
MODEL_ERROR = 0.10
OVERLAP_CUT = 0.5

CHAPTERS = {
    "02": ("TensorCore tiles", "notebooks/02-tensor-core-tiles.ipynb"),
    "03": ("Precision", "notebooks/03-precision.ipynb"),
    "04": ("Mixed-precision training", "notebooks/04-mixed-precision-training.ipynb"),
    "06": ("Batch size and accumulation", "notebooks/06-batch-size-and-accumulation.ipynb"),
    "07": ("CPU-GPU overlap", "notebooks/07-cpu-gpu-overlap.ipynb"),
    "08": ("Distributed communication", "notebooks/08-distributed-communication.ipynb"),
    "09": ("Deployment", "notebooks/09-deployment.ipynb"),
    "10": ("Utilisation and cost", "notebooks/10-utilisation-and-cost.ipynb"),
}


@dataclass(frozen=True)
class Claim:
    """A claim as tuning guides put it, the chapter that explains it, the rule of its verdict."""

    id: str
    chapter: str
    text: str
    threshold: str
    claimed: float | None = None      # the claimed figure (a range's low end), for the figure
    unit: str = "x"

    def to_dict(self) -> dict:
        title, path = CHAPTERS[self.chapter]
        return {**asdict(self), "chapter_title": title, "chapter_path": path}


def _ratio_rule(claimed: float, what: str) -> str:
    return (f"holds if {what} reaches {RATIO_SHARE * claimed:.3g}x "
            f"({RATIO_SHARE:.0%} of the claimed {claimed:g}x)")


_CLAIMS = (
    Claim("tile_spread", "02", "the right tile choice gives 2.5x throughput (best vs worst "
          "sensible tile of one realistic matmul)",
          _ratio_rule(2.5, "the best tile's TFLOP/s over the worst's"), 2.5),
    Claim("tile_peak", "02", "the best tile reaches 85-92% of peak",
          f"holds if the best tile reaches {85 - PEAK_SLACK_POINTS:g}% of the datasheet's dense "
          f"peak (the claim's 85% less {PEAK_SLACK_POINTS:g} points for clock and power "
          "variation)", 85.0, "%"),
    Claim("tf32_speed", "03", "TF32 gives about 8x fp32",
          _ratio_rule(8, "TF32's matmul TFLOP/s over IEEE fp32's"), 8.0),
    Claim("tf32_accuracy", "03", "... at no cost in accuracy",
          f"holds if TF32's matmul error vs float64 is within {NO_COST_FACTOR:g}x of fp32's",
          NO_COST_FACTOR, "x fp32's error"),
    Claim("half_speed", "03", "bf16 and fp16 double TF32's rate again",
          _ratio_rule(2, "bf16's and fp16's TFLOP/s over TF32's"), 2.0),
    Claim("fp8_speed", "03", "fp8 doubles bf16's rate once more",
          _ratio_rule(2, "fp8's TFLOP/s over bf16's"), 2.0),
    Claim("sparsity_speed", "03", "2:4 structured sparsity doubles the matmul rate",
          _ratio_rule(2, "the 2:4-sparse matmul's rate over the dense one's"), 2.0),
    Claim("mp_memory", "04", "mixed precision saves 40% memory",
          f"holds if bf16 autocast's step peak is at least {RATIO_SHARE * 40:g}% "
          f"({RATIO_SHARE:.0%} of 40%) below fp32's, on every preset measured", 40.0, "%"),
    Claim("mp_speed", "04", "mixed precision runs 1.8-2.5x faster",
          _ratio_rule(1.8, "bf16 autocast's samples/s over fp32's, on every preset measured,")
          + "; the range's low end", 1.8),
    Claim("accumulation", "06", "gradient accumulation gives the big batch without the memory",
          f"holds if k micro-batches give the large batch's gradient within {ACCUMULATION_GAP:g}"
          " of its largest value and peak below the large batch's memory (the throughput cost "
          "is reported beside it)", None, ""),
    Claim("max_batch", "06", "the memory model predicts the largest batch that fits",
          f"holds if the model's prediction of the largest micro-batch's peak is within "
          f"{MODEL_ERROR:.0%} of the verified peak, for every preset and precision measured",
          None, ""),
    Claim("pipeline_overlap", "07", "DataLoader workers, pin_memory and non_blocking copies make "
          "loading overlap compute",
          f"holds if they cut the device's idle fraction by at least {OVERLAP_CUT:.0%}",
          None, ""),
    Claim("compression", "08", "gradient compression makes communication 3x faster",
          _ratio_rule(3, "the plain all-reduce's exposed communication time per sync over the "
                         "best compressing hook's") + " (the loss each hook reaches is reported "
          "beside it)", 3.0),
    Claim("bill", "10", "bf16 halves the bill (cost per million samples)",
          _ratio_rule(2, "fp32's cost per million training samples over bf16's") + " (energy "
          "per sample and cost per million at your price are reported beside it)", 2.0),
)
CLAIMS: dict[str, Claim] = {c.id: c for c in _CLAIMS}


@dataclass(frozen=True)
class Verdict:
    """One claim's verdict on this machine: status, where, what was measured, and why not."""

    claim: str
    status: str
    scope: str = ""            # "on this GPU: ..." / "on this CPU: ..." / ""
    measured: str = ""         # the measurement behind the verdict, in words with numbers
    reason: str = ""           # why it cannot be tested / was not measured
    figures: dict = field(default_factory=dict)   # name -> {"label", "value", "unit"}
    noisy: bool = False

    def __post_init__(self) -> None:
        if self.claim not in CLAIMS:
            raise ValueError(f"unknown claim {self.claim!r}; known: {sorted(CLAIMS)}")
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {STATUSES}")
        if self.status in (UNTESTABLE, NOT_MEASURED) and not self.reason:
            raise ValueError(f"a {self.status!r} verdict needs the reason")

    def to_dict(self) -> dict:
        return {**CLAIMS[self.claim].to_dict(), "status": self.status, "scope": self.scope,
                "measured": self.measured, "reason": self.reason, "figures": self.figures,
                "noisy": self.noisy}


def holds_ratio(measured: float, claimed: float) -> bool:
    """A speed-up or saving claim's rule: the measured figure reaches RATIO_SHARE of it."""
    return measured >= RATIO_SHARE * claimed


def figure(label: str, value: float | None, unit: str = "") -> dict:
    """One named number of a report (compared as B / A between two reports)."""
    return {"label": label, "value": value, "unit": unit}


def thresholds() -> dict:
    """The verdict thresholds, for the report's JSON and HTML."""
    return {"ratio_share": RATIO_SHARE, "peak_slack_points": PEAK_SLACK_POINTS,
            "no_cost_factor": NO_COST_FACTOR, "accumulation_gap": ACCUMULATION_GAP,
            "model_error": MODEL_ERROR, "overlap_cut": OVERLAP_CUT,
            "rules": {c.id: c.threshold for c in _CLAIMS}}
