"""The report's vocabulary: the claim record (the register's entries), the statuses, how each
is drawn, the verdict record, and the rules the judging code shares (a figure reached within
its noise, a range, a loss reached).

    from a800lab.report.claims import HOLDS, METHOD_ON_CPU, LOOKS, Claim, Verdict, reaches
    LOOKS[HOLDS].css, LOOKS[HOLDS].colour       # "holds", "#1a7f37": HTML, panel, terminal
    reaches(2.3, 0.25, 2.5)                     # True: 2.3 + its spread 0.25 reaches 2.5

Statuses (one verdict per claim of a800lab.report.register.REGISTER):
- HOLDS / FAILS: measured here on the claim's own configuration, and the figure reaches (does
  not reach) the claimed one within the measurement's noise.
- METHOD_ON_CPU: a CPU run of a claim about GPU hardware (tensor cores, HBM, NVLink, NCCL, GPU
  energy) or about models a CPU cannot train at their size: the method ran at the chapters'
  small CPU sizes and its numbers are shown, but they say nothing about a GPU. Never drawn as a
  pass or a fail.
- FAILED: the measurement itself failed: out of memory, unsupported here, a wrong result (the
  reason says which). Running again gives the same; change the configuration or the machine.
- UNTESTABLE: this machine lacks what the claim needs (a GPU, 2 GPUs, fp8, torchvision), why.
- NOT_MEASURABLE: no measurement can decide it (a cluster's job mix, a customer's case), why.
- NOT_MEASURED: its points are not in the results yet (time budget, Stop): run again to resume.

Noise: a figure built from timed records carries a spread, half the records' relative IQR added
(a ratio of two rates: both records' relative half-IQRs summed). A claimed figure is reached
when value + spread >= claimed; a range ("1.8-2.5x") from its low end, and a value whose lower
edge is above the high end is reported as above the range. Counted quantities (bytes, calls)
have no spread.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

HOLDS = "holds here"
FAILS = "does not hold here"
METHOD_ON_CPU = "method shown on CPU; says nothing about the GPU"
FAILED = "failed"
UNTESTABLE = "cannot be tested on this machine"
NOT_MEASURABLE = "not measurable"
NOT_MEASURED = "not measured yet"
STATUSES = (HOLDS, FAILS, METHOD_ON_CPU, FAILED, UNTESTABLE, NOT_MEASURABLE, NOT_MEASURED)
NEEDS_REASON = (METHOD_ON_CPU, FAILED, UNTESTABLE, NOT_MEASURABLE, NOT_MEASURED)

ACCUMULATION_GAP = 1e-5   # largest gradient difference / largest gradient: rounding ~1e-7
MODEL_ERROR = 0.10        # the memory model's prediction of the verified peak
LOSS_TOLERANCE = 0.02     # a held-out loss "reached": within 2% of the baseline's (one seed)


CHAPTERS = {
    "02": ("TensorCore tiles", "notebooks/02-tensor-core-tiles.ipynb"),
    "03": ("Precision", "notebooks/03-precision.ipynb"),
    "04": ("Mixed-precision training", "notebooks/04-mixed-precision-training.ipynb"),
    "05": ("Loss scaling", "notebooks/05-loss-scaling.ipynb"),
    "06": ("Batch size and accumulation", "notebooks/06-batch-size-and-accumulation.ipynb"),
    "07": ("CPU-GPU overlap", "notebooks/07-cpu-gpu-overlap.ipynb"),
    "08": ("Distributed communication", "notebooks/08-distributed-communication.ipynb"),
    "09": ("Deployment", "notebooks/09-deployment.ipynb"),
    "10": ("Utilisation and cost", "notebooks/10-utilisation-and-cost.ipynb"),
    "12": ("Profile, compile and tune your own step",
           "notebooks/12-profile-compile-tune.ipynb"),
}
SOURCES = ("the guide", "the guide's second document", "NVIDIA's datasheets", "the lab")


@dataclass(frozen=True)
class Claim:
    """One statement and how the lab judges it (a800lab.report.register says how to read
    one)."""

    id: str
    source: str           # one of SOURCES
    section: str          # where it stands: "summary table", "TensorCore section", ...
    stated: str           # the claim as the guide puts it (paraphrased), with its figure
    figure: str           # the guide's figure as written ("92%", "1.8-2.5x"), "" if none
    chapter: str          # the chapter that explains it (CHAPTERS)
    reading: str = ""     # the lab's reading: what is compared with what, model, baseline
    other: str = ""       # the reading not chosen, or what else is shown beside
    method: str = ""      # how it is measured
    decides: str = ""     # what decides the verdict
    judge: str = ""       # the judging function (report.verdicts.JUDGES); "" if not measurable
    low: float | None = None    # the claimed figure (a range's low end), for the rules
    high: float | None = None   # a range's high end
    unit: str = "x"
    about: str = ""       # the hardware it is about ("tensor cores", "HBM", "NVLink, NCCL")
    cpu_answers: bool = False   # a CPU run answers it (counted bytes, software semantics)
    not_measurable: str = ""    # why no measurement decides it

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"{self.id}: source {self.source!r} is not one of {SOURCES}")
        if self.chapter not in CHAPTERS:
            raise ValueError(f"{self.id}: chapter {self.chapter!r} is not one of {list(CHAPTERS)}")
        if bool(self.judge) == bool(self.not_measurable):
            raise ValueError(f"{self.id}: give a judge, or say why it is not measurable")
        if self.judge and not (self.reading and self.decides):
            raise ValueError(f"{self.id}: a measured claim needs its reading and what decides it")

    def to_dict(self) -> dict:
        title, path = CHAPTERS[self.chapter]
        return {**asdict(self), "chapter_title": title, "chapter_path": path,
                "text": self.stated}


@dataclass(frozen=True)
class Look:
    """How a status is drawn: CSS class (HTML), colour (panel, terminal on a TTY), and a short
    word for narrow places (compare tables)."""

    css: str
    colour: str
    short: str
    ansi: str


LOOKS = {
    HOLDS: Look("holds", "#1a7f37", "holds", "32"),
    FAILS: Look("fails", "#c62828", "does not hold", "31"),
    METHOD_ON_CPU: Look("method-cpu", "#0969da", "method on CPU", "34"),
    FAILED: Look("failed", "#8250df", "failed", "35"),
    UNTESTABLE: Look("untestable", "#6e6e6e", "untestable here", "90"),
    NOT_MEASURABLE: Look("not-measurable", "#57606a", "not measurable", "90"),
    NOT_MEASURED: Look("not-measured", "#9a6700", "not measured yet", "33"),
}


@dataclass(frozen=True)
class Verdict:
    """One claim's verdict on this machine: status, where, what was measured, and why."""

    claim: str
    status: str
    scope: str = ""            # "on this GPU: ..." / "on this CPU (...): ..." / ""
    measured: str = ""         # the measurement behind the verdict, in words with numbers
    reason: str = ""           # why it is only a method / failed / untestable / not measured
    figures: dict = field(default_factory=dict)   # name -> {"label", "value", "unit"}
    noisy: bool = False

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {STATUSES}")
        if self.status in NEEDS_REASON and not self.reason:
            raise ValueError(f"a {self.status!r} verdict needs the reason")

    def to_dict(self, claim: dict) -> dict:
        """The verdict beside its register entry (`claim`: Claim.to_dict())."""
        return {**claim, "status": self.status, "scope": self.scope, "measured": self.measured,
                "reason": self.reason, "figures": self.figures, "noisy": self.noisy}


def figure(label: str, value: float | None, unit: str = "") -> dict:
    """One named number of a report (compared as B / A between two reports)."""
    return {"label": label, "value": value, "unit": unit}


# ---- the rules ---------------------------------------------------------------------------------
def rel_spread(time_ms) -> float:
    """Half the relative IQR of a record's time samples (0 with fewer than 4 samples)."""
    samples = [t for t in time_ms if t > 0]
    if len(samples) < 4:
        return 0.0
    q1, _, q3 = statistics.quantiles(samples, n=4)
    median = statistics.median(samples)
    return (q3 - q1) / 2 / median if median > 0 else 0.0


def reaches(value: float, spread: float, claimed: float) -> bool:
    """The measured `value` reaches `claimed` within its noise: value + spread >= claimed."""
    return value + spread >= claimed


def beyond_range(value: float, spread: float, low: float, high: float | None,
                 unit: str = "x") -> str:
    """" (above the claimed range 1.8-2.5x)" when even the value's lower edge is above the high
    end; "" otherwise (also for a claim without a range)."""
    if high is None or high == low or value - spread <= high:
        return ""
    return f" (above the claimed range {low:g}-{high:g}{unit}: the effect is there, larger)"


def loss_reached(loss: float | None, baseline: float | None,
                 tolerance: float = LOSS_TOLERANCE) -> bool:
    """A held-out loss reaches the baseline's: finite and at most (1 + tolerance) x baseline."""
    return loss is not None and baseline is not None and loss <= baseline * (1 + tolerance)


def with_spread(value: float, spread: float, unit: str = "x", digits: int = 3) -> str:
    """"2.31x ± 0.12" (the spread only where there is one)."""
    text = f"{value:.{digits}g}{unit}"
    return text + (f" ± {spread:.2g}" if spread > 0 else "")


def thresholds() -> dict:
    """The shared constants of the rules, for the report's JSON and HTML (each claim's own rule
    is its register entry's `decides`)."""
    return {"accumulation_gap": ACCUMULATION_GAP, "model_error": MODEL_ERROR,
            "loss_tolerance": LOSS_TOLERANCE,
            "noise": "a figure is reached when value + spread >= claimed; the spread is half "
                     "the relative IQR of the timings behind it (summed for a ratio)"}
