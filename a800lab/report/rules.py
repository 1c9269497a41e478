"""The rules every judge shares: a figure ± its spread against the claimed one (three_way), over
independent runs (confirmed), the words for a figure they leave undecided, and the thresholds."""

import statistics

from ..core.noise import quartiles
from .claims import FAILS, HOLDS, INCONCLUSIVE, RUNS

ACCUMULATION_GAP = 1e-5   # largest gradient difference / largest gradient: rounding ~1e-7
MODEL_ERROR = 0.10        # the memory model's prediction of the verified peak
LOSS_TOLERANCE = 0.02     # a held-out loss "reached": within 2% of the baseline's
QUIETER = ("run it again on a quieter machine, or with more repeats (--full), to decide")


def half_iqr(samples) -> float:
    """Half the IQR of samples (0 with fewer than 4): the spread in the samples' own unit."""
    values = [float(v) for v in samples]
    if len(values) < 4:
        return 0.0
    q1, _, q3 = quartiles(values)
    return (q3 - q1) / 2


def rel_spread(samples) -> float:
    """Half the relative IQR of positive samples (timings, power; 0 with fewer than 4)."""
    positive = [t for t in samples if t > 0]
    median = statistics.median(positive) if len(positive) >= 4 else 0.0
    return half_iqr(positive) / median if median > 0 else 0.0


def three_way(value: float, spread: float, claimed: float, at_most: bool = False) -> str:
    """HOLDS when value - spread reaches `claimed`, FAILS when value + spread falls short, else
    INCONCLUSIVE (mirrored for an `at_most` figure)."""
    low, high = value - spread, value + spread
    if at_most:
        return HOLDS if high <= claimed else FAILS if low > claimed else INCONCLUSIVE
    return HOLDS if low >= claimed else FAILS if high < claimed else INCONCLUSIVE


def confirmed(runs, claimed: float, at_most: bool = False) -> str:
    """Independent runs' (value, spread) against `claimed`: HOLDS when every run holds, FAILS
    when every run fails (three_way), else INCONCLUSIVE, and so with fewer than RUNS runs."""
    each = {three_way(v, s, claimed, at_most) for v, s in runs}
    return each.pop() if len(runs) >= RUNS and len(each) == 1 else INCONCLUSIVE


def over_runs(runs) -> tuple[float, float]:
    """The runs' median value and the spread that reaches every run's value ± its own spread."""
    middle = statistics.median(v for v, _ in runs)
    return middle, max(max(v + s - middle, middle - v + s) for v, s in runs)


def runs_text(runs, unit: str = "x") -> str:
    """"2.31x over 3 runs (2.28 ± 0.02, 2.31, 2.35 ± 0.01)"."""
    middle, _ = over_runs(runs)
    each = ", ".join(with_spread(v, s, "") for v, s in runs)
    return f"{middle:.3g}{unit} over {len(runs)} run{'s' * (len(runs) != 1)} ({each})"


def combine(statuses) -> str:
    """Several figures that must all hold: FAILS if one fails, else INCONCLUSIVE if one is."""
    found = set(statuses)
    return FAILS if FAILS in found else INCONCLUSIVE if INCONCLUSIVE in found else HOLDS


def within_noise(value: float, spread: float, claimed: float, unit: str = "") -> str:
    """What an INCONCLUSIVE verdict says: where the figure lies, and what would decide it."""
    return (f"the claimed {claimed:g}{unit} lies within the measured {value:.3g}{unit} ± "
            f"{spread:.2g}: {QUIETER}")


def undecided(runs, claimed: float, unit: str = "") -> str:
    """Why `confirmed` left the runs INCONCLUSIVE: too few runs, or the figure within them."""
    if len(runs) < RUNS:
        return (f"measured in {len(runs)} run{'s' * (len(runs) != 1)}: a timed figure is decided "
                f"over {RUNS} independent runs (a GPU report and --full run them; measure again "
                "to add one)")
    return within_noise(*over_runs(runs), claimed, unit)


def beyond_range(value: float, spread: float, low: float, high: float | None,
                 unit: str = "x") -> str:
    """" (above the claimed range ...)" when even value - spread is above the high end."""
    if high is None or high == low or value - spread <= high:
        return ""
    return f" (above the claimed range {low:g}-{high:g}{unit}: the effect is there, larger)"


def with_spread(value: float, spread: float, unit: str = "x") -> str:
    """"2.31x ± 0.12" (the spread only where there is one)."""
    return f"{value:.3g}{unit}" + (f" ± {spread:.2g}" if spread > 0 else "")


def thresholds() -> dict:
    """The rules' shared constants, for the report's JSON and HTML."""
    return {"accumulation_gap": ACCUMULATION_GAP, "model_error": MODEL_ERROR,
            "loss_tolerance": LOSS_TOLERANCE,
            "noise": "holds when value - spread reaches the figure, does not hold when value + "
                     "spread falls short, inconclusive otherwise; a timed figure is measured in "
                     f"{RUNS} independent runs and holds (or does not) only when every run "
                     "does; each run's spread is half the relative IQR of the figure's own "
                     "samples (timings; power samples for power; per-step idle fractions for "
                     "an idle fraction; summed for a ratio), a loss's the range over seeds; "
                     "counted figures have none",
            "winners": "a winner among candidates (best tile, best hook) is judged from a "
                       "separate confirmation run"}
