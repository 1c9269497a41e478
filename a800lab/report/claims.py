"""The report's vocabulary: a claim's definition (Claim, its Readings, a Doc verdict), the
statuses and how each is drawn (LOOKS), and the verdict record; report.rules decides."""

from collections.abc import Callable
from dataclasses import dataclass, field

HOLDS, FAILS = "holds here", "does not hold here"
INCONCLUSIVE = "inconclusive (within noise)"
AGREES = "agrees with the documentation"
PARTLY = "partly agrees with the documentation"
CONTRADICTED = "contradicted by the documentation"
METHOD_ON_CPU = "method shown on CPU; says nothing about the GPU"
FAILED = "failed"
UNTESTABLE = "cannot be tested on this machine"
NOT_MEASURABLE = "not measurable"
NOT_MEASURED = "not measured yet"
JUDGED = (HOLDS, FAILS, INCONCLUSIVE)        # what a CPU never says of a GPU claim
DOCUMENTED = (AGREES, PARTLY, CONTRADICTED)
MEASURED, DOCUMENTATION, UNMEASURABLE = "measured", "documentation", "not measurable"

RUNS = 3                  # a deciding timed figure: confirmed in this many independent runs
RUN = "run"               # the battery's point parameter numbering a point's independent runs

CHAPTERS = {
    "01": ("Device and topology", "notebooks/01-device-and-topology.ipynb"),
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
    "13": ("Serving", "notebooks/13-serving.ipynb"),
}
SOURCES = {"G": "the guide", "D": "the getting-started guide"}


@dataclass(frozen=True)
class Reading:
    """One way to read a claim's words: the literal one decides, the others are shown beside;
    `unmeasured`: why the battery does not measure this one."""

    name: str
    text: str
    literal: bool = False
    unmeasured: str = ""


@dataclass(frozen=True)
class Doc:
    """A documentation verdict, what the documents say, and them as (title, section, address)."""

    verdict: str
    finding: str
    sources: tuple[tuple[str, str, str], ...]

    def cited(self) -> str:
        return "; ".join(f"{title}, {section} ({url})" for title, section, url in self.sources)


@dataclass(frozen=True)
class Claim:
    """One claim, defined once: its words (excerpts joined by " … ") and readings, decided by
    one of a judge (measured), a Doc (documentation) or a reason nothing measures it (then a
    judge may show the method on the lab's own workload, never deciding). `cites`: the guide's
    sentences; a check beside the guide names its `source` and cites the sentences it tests."""

    id: str
    cites: tuple[str, ...]
    stated: str
    chapter: str
    figure: str = ""          # the guide's figure as written ("92%", "1.8-2.5x")
    readings: tuple[Reading, ...] = ()
    decides: str = ""         # the rule, in words
    low: float | None = None  # the claimed figure (a range's low end)
    high: float | None = None
    unit: str = "x"
    steps: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()   # a800lab.report.plan.NEEDS: what the machine must have
    judge: Callable | None = None
    about: str = ""           # the hardware it is about: what a CPU run cannot answer
    cpu_answers: bool = False  # counted or computed the same way on any device
    doc: Doc | None = None
    not_measurable: str = ""
    source: str = ""          # for checks beside the guide: whose statement it is

    def __post_init__(self) -> None:
        if sum(map(bool, (self.judge and not self.not_measurable, self.doc,
                          self.not_measurable))) != 1 or self.doc and self.judge:
            raise ValueError(f"{self.id}: give one of a judge, a Doc, or why nothing measures it")
        if self.chapter not in CHAPTERS:
            raise ValueError(f"{self.id}: chapter {self.chapter!r} is not one of {list(CHAPTERS)}")
        if not (self.cites or self.source):
            raise ValueError(f"{self.id}: cite the guide's sentences, or name the source")
        if self.judge and not (self.decides and self.steps
                               and sum(r.literal for r in self.readings) == 1):
            raise ValueError(f"{self.id}: a measured claim needs its steps, what decides it and "
                             "exactly one literal reading")

    @property
    def kind(self) -> str:
        return UNMEASURABLE if self.not_measurable else MEASURED if self.judge else DOCUMENTATION

    @property
    def where(self) -> str:   # "the guide G.3.2" / "NVIDIA's datasheets, testing the guide's ..."
        guide = self.cites and f"{SOURCES[self.cites[0][0]]} {', '.join(self.cites)}"
        return f"{self.source}, testing {guide}" if self.source and guide else \
            self.source or guide

    def to_dict(self) -> dict:   # the register's row (`report --register --json`)
        title, path = CHAPTERS[self.chapter]
        return {"id": self.id, "cites": list(self.cites), "where": self.where,
                "stated": self.stated, "kind": self.kind, "figure": self.figure,
                "readings": [{"name": r.name, "text": r.text, "decides": r.literal,
                              **({"unmeasured": r.unmeasured} if r.unmeasured else {})}
                             for r in self.readings],
                "decides": self.decides or (self.doc and f"{self.doc.verdict}: {self.doc.finding}")
                or f"not measurable: {self.not_measurable}",
                "about": self.about, "cpu_answers": self.cpu_answers,
                "documents": self.doc.cited() if self.doc else "",
                "chapter": self.chapter, "chapter_title": title, "chapter_path": path}


def measured(**definition) -> Callable[[Callable], Claim]:
    """Decorator: the judging function below it becomes a Claim named after it."""
    return lambda judge: Claim(id=judge.__name__, judge=judge, **definition)


@dataclass(frozen=True)
class Look:
    """How a status is drawn: CSS class (HTML), colour (panel), ANSI colour (terminal)."""
    css: str
    colour: str
    ansi: str


LOOKS = {
    HOLDS: Look("holds", "#1a7f37", "32"),
    FAILS: Look("fails", "#c62828", "31"),
    INCONCLUSIVE: Look("inconclusive", "#bc4c00", "38;5;208"),
    AGREES: Look("doc-agrees", "#116329", "36"),
    PARTLY: Look("doc-partly", "#7d4e00", "36"),
    CONTRADICTED: Look("doc-contradicted", "#a40e26", "36"),
    METHOD_ON_CPU: Look("method-cpu", "#0969da", "34"),
    FAILED: Look("failed", "#8250df", "35"),
    UNTESTABLE: Look("untestable", "#6e6e6e", "90"),
    NOT_MEASURABLE: Look("not-measurable", "#57606a", "90"),
    NOT_MEASURED: Look("not-measured", "#9a6700", "33"),
}
STATUSES = tuple(LOOKS)   # every status, in this order


@dataclass(frozen=True)
class Verdict:
    """One claim's verdict on this machine: status, where, what was measured, and why."""
    claim: str
    status: str
    scope: str = ""            # "on this GPU: ..." / "on this CPU (...)" / "" (documentation)
    measured: str = ""         # the measurement behind the verdict, in words with numbers
    reason: str = ""           # why not more / what would decide it / the documents' finding
    figures: dict = field(default_factory=dict)   # name -> {"label", "value", "unit"}
    noisy: bool = False
    readings: tuple = ()       # ({"name", "status", "text"}, ...): the other readings' outcomes

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {STATUSES}")
        if self.status not in (HOLDS, FAILS) and not self.reason:
            raise ValueError(f"a {self.status!r} verdict needs the reason")

    def to_dict(self, claim: dict) -> dict:   # beside its register row (Claim.to_dict())
        return {**claim, "status": self.status, "scope": self.scope, "measured": self.measured,
                "reason": self.reason, "figures": self.figures, "noisy": self.noisy,
                "other_readings": list(self.readings)}


def figure(label: str, value: float | None, unit: str = "") -> dict:
    """One named number of a report (compared as B / A between two reports)."""
    return {"label": label, "value": value, "unit": unit}
