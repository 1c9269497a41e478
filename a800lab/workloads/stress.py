"""A short stress run per GPU (matmul throughput and copy bandwidth) and the cards it flags:
slower than their siblings or their datasheet. Not a memory test (DCGM's: workloads.dcgm).

    report = stress_report()             # every visible GPU (a CPU without one), one at a time
    flag_cards(cards, threshold=0.1)     # pure logic: also for recorded cards
"""

import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch

from ..core.backends import HAS_CUDA
from ..core.cancel import CancelToken
from ..core.doctor import table_lines
from .peak import measure_peak
from .peak import short_number as _num

THRESHOLD = 0.1             # a card more than 10% below its siblings' median is flagged
DATASHEET_THRESHOLD = 0.4   # ... or more than 40% below its datasheet
METRICS = {"matmul_tflops": "matmul TFLOP/s", "copy_gbs": "copy GB/s"}


@dataclass(frozen=True)
class CardResult:
    """One card's stress numbers beside its datasheet (None where unknown or failed)."""

    device: str                          # "cuda:3" or "cpu"
    name: str
    precision: str
    matmul_tflops: float | None
    copy_gbs: float | None
    datasheet_tflops: float | None = None
    datasheet_gbs: float | None = None
    noisy: bool = False
    message: str = ""

    def datasheet(self, metric: str) -> float | None:
        return {"matmul_tflops": self.datasheet_tflops, "copy_gbs": self.datasheet_gbs}[metric]


@dataclass(frozen=True)
class Flag:
    """A card below its reference by more than the threshold."""

    device: str
    metric: str
    value: float
    reference: float
    against: str                          # "siblings" or "datasheet"
    message: str

    @property
    def ratio(self) -> float:
        return self.value / self.reference


def check_thresholds(threshold: float, datasheet_threshold: float) -> None:
    for name, value in (("threshold", threshold), ("datasheet_threshold", datasheet_threshold)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
            raise ValueError(f"{name}={value!r} must be a fraction between 0 and 1, e.g. 0.1")


def flag_cards(cards: Sequence[CardResult], *, threshold: float = THRESHOLD,
               datasheet_threshold: float = DATASHEET_THRESHOLD) -> list[Flag]:
    """Flags for every card and metric below its siblings' median (the card left out) or its
    datasheet by more than the thresholds (fractions)."""
    check_thresholds(threshold, datasheet_threshold)
    flags = []
    for card in cards:
        for metric, label in METRICS.items():
            value = getattr(card, metric)
            if value is None:
                continue
            noisy = " (its timing was noisy: run again before acting)" if card.noisy else ""
            siblings = [getattr(c, metric) for c in cards if c is not card and
                        c.name == card.name and getattr(c, metric) is not None]
            if siblings:
                median = statistics.median(siblings)
                if value < (1 - threshold) * median:
                    flags.append(Flag(card.device, metric, value, median, "siblings", (
                        f"{card.device} ({card.name}): {label} {value:.4g} is "
                        f"{100 * (1 - value / median):.0f}% below the median {median:.4g} of "
                        f"its {len(siblings)} sibling(s){noisy}")))
            sheet = card.datasheet(metric)
            if sheet and value < (1 - datasheet_threshold) * sheet:
                flags.append(Flag(card.device, metric, value, sheet, "datasheet", (
                    f"{card.device} ({card.name}): {label} {value:.4g} is {100 * value / sheet:.0f}"
                    f"% of its datasheet {sheet:.4g}{noisy}")))
    return flags


@dataclass(frozen=True)
class StressReport:
    """The cards measured and the flags they raised, with the thresholds used."""

    cards: tuple[CardResult, ...]
    flags: tuple[Flag, ...]
    threshold: float = THRESHOLD
    datasheet_threshold: float = DATASHEET_THRESHOLD

    def format(self) -> str:
        rows = [(c.device, c.name, c.precision, _num(c.matmul_tflops), _num(c.datasheet_tflops),
                 _num(c.copy_gbs), _num(c.datasheet_gbs), "noisy" if c.noisy else c.message)
                for c in self.cards]
        headers = ("device", "name", "precision", "TFLOP/s", "datasheet", "copy GB/s",
                   "datasheet", "note")
        lines = table_lines(headers, rows)
        lines.append(f"Flags (more than {100 * self.threshold:.0f}% below the siblings' median "
                     f"or {100 * self.datasheet_threshold:.0f}% below the datasheet):")
        lines += [f"  - {f.message}" for f in self.flags] or ["  - none."]
        if len(self.cards) < 2:
            lines.append("  (one card: no siblings to compare with; only the datasheet check)")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"cards": [asdict(c) for c in self.cards],
                "flags": [{**asdict(f), "ratio": f.ratio} for f in self.flags],
                "threshold": self.threshold, "datasheet_threshold": self.datasheet_threshold}


def stress_card(device: str, *, precision: str | None = None, size: int | None = None,
                budget_s: float = 0.3, copy_bytes: int | None = None,
                cancel: CancelToken | None = None) -> CardResult:
    """One card's matmul rate and copy bandwidth (measure_peak for one precision)."""
    precision = precision or ("fp32" if device == "cpu" else "bf16")
    report = measure_peak(device, precisions=[precision], size=size, budget_s=budget_s,
                          copy_bytes=copy_bytes, cancel=cancel)
    entry = report.entries[0]
    noisy = bool(entry.timing is not None and entry.timing.noisy)
    return CardResult(device=device, name=report.device_name, precision=entry.precision,
                      matmul_tflops=entry.tflops, copy_gbs=report.mem_bw_gbs,
                      datasheet_tflops=entry.datasheet_tflops,
                      datasheet_gbs=report.datasheet_mem_bw_gbs, noisy=noisy,
                      message=entry.message)


def stress_report(devices: Sequence[str] | None = None, *, threshold: float = THRESHOLD,
                  datasheet_threshold: float = DATASHEET_THRESHOLD,
                  on_card: Callable[[CardResult], None] | None = None,
                  **options) -> StressReport:
    """stress_card for each device (default: every GPU, else the CPU), one after another so that
    cards share no power or host bandwidth, then flag_cards (thresholds checked first)."""
    check_thresholds(threshold, datasheet_threshold)
    every = [f"cuda:{i}" for i in range(torch.cuda.device_count())] if HAS_CUDA else ["cpu"]
    cards = []
    for device in devices or every:
        cards.append(stress_card(device, **options))
        if on_card is not None:
            on_card(cards[-1])
    flags = flag_cards(cards, threshold=threshold, datasheet_threshold=datasheet_threshold)
    return StressReport(tuple(cards), tuple(flags), threshold, datasheet_threshold)
