"""A parameter a user may vary, declared once as a field of its lab's frozen spec: its choices or
range, per-device default, unit and help. The spec checks itself with it (the only validator);
the panels' controls, the commands' options and the tuners' axes are derived from it.

    @dataclass(frozen=True)
    class TrainSpec:
        accum_steps: int = knob(1, "micro-batches per optimizer step", integer=True, lo=1,
                                example="4")
        channels_last: bool = knob(False, "NHWC layout", choices=(False, True), lever=True)
        def __post_init__(self): check_knobs(self)

    knobs(TrainSpec)["accum_steps"].help;  tuner_axes(TrainSpec, "cuda")
"""

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields

from .checks import positive_float, positive_int


@dataclass(frozen=True)
class Knob:
    """What a spec field accepts and how it is shown.

    choices, or a number from `lo` (an int: inclusive; a float 0: exclusive) up to `hi` (None:
    open); `pow2`: a power of two; `bounds`: "[" or "(" (and "]" or ")" with hi) where the ends
    differ from that rule, e.g. "()" for a percentile in (0, 100); `default` MISSING: a field
    the spec requires; `gpu`: the default on a GPU where it differs; `canon`: names a value
    canonically and refuses the rest; `named`: any name goes (`choices` are the panel's; where
    the model is built checks it); `available(device)`: the choices a device can run; `cli`:
    the option's name where it is not the field's; `scale`, `panel_lo` (None: `lo`) and
    `panel_hi`: the panel's slider; `lever`: a kernel lever of the step; `tune`/`tune_gpu`: the
    values a tuner tries on a CPU / a GPU; `code`: the line that sets it in the code to paste."""

    default: object
    help: str
    choices: tuple = ()
    lo: float | None = None
    hi: float | None = None
    integer: bool = False
    pow2: bool = False
    example: str = ""
    unit: str = ""
    gpu: object = None
    canon: Callable | None = None
    available: Callable | None = None
    cli: str = ""
    scale: str = "linear"
    panel_lo: float | None = None
    panel_hi: float | None = None
    lever: bool = False
    tune: tuple = ()
    tune_gpu: tuple = ()
    code: str = ""
    named: bool = False
    bounds: str = ""

    @property
    def is_bool(self) -> bool:
        return self.choices == (False, True)

    def default_for(self, device: str):
        return self.gpu if self.gpu is not None and device.startswith("cuda") else self.default

    def choices_for(self, device: str) -> tuple:
        return tuple(self.available(device)) if self.available else self.choices

    def check(self, name: str, value):
        """`value` (canonical) when the field accepts it, else ValueError saying what to give."""
        if self.canon is not None:
            return self.canon(value)
        if self.named:
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name}={value!r} must be a name, e.g. {self.choices[0]!r}")
            return value
        if self.is_bool:
            if not isinstance(value, bool):
                raise ValueError(f"{name}={value!r} must be True or False")
            return value
        if self.choices:
            if value not in self.choices:
                raise ValueError(f"{name}={value!r} is not a choice: use one of {self.choices}")
            return value
        return self._number(name, value)

    def _number(self, name: str, value):
        if self.integer and self.lo == 1 and self.hi is None and not self.pow2:
            return positive_int(name, value, self.example)
        if not self.integer and self.lo == 0 and self.hi is None and not self.bounds:
            return positive_float(name, value, self.example)
        low, high = (self.bounds or "[")[0], (self.bounds or "[]")[1:] or "]"
        kind = numbers.Integral if self.integer else numbers.Real
        ok = not isinstance(value, bool) and isinstance(value, kind) and math.isfinite(value) \
            and (self.lo is None or (value >= self.lo if low == "[" else value > self.lo)) \
            and (self.hi is None or (value <= self.hi if high == "]" else value < self.hi))
        if self.pow2:
            ok = ok and value > 0 and value == 2 ** round(math.log2(value))
            what = f"a power of two >= {self.lo}" if self.hi is None else \
                f"a power of two from {self.lo} to {self.hi}"
        elif self.bounds:
            what = f"{'an int' if self.integer else 'a finite number'} " + (
                f"in {low}{self.lo:g}, {self.hi:g}{high}" if self.hi is not None else
                f"{'>=' if low == '[' else '>'} {self.lo:g}")
        else:
            what = f"{'an int' if self.integer else 'a finite number'} from {self.lo}" + \
                ("" if self.hi is None else f" to {self.hi}")
        if not ok:
            example = f", e.g. {self.example}" if self.example else ""
            raise ValueError(f"{name}={value!r} must be {what}{example}")
        return int(value) if self.integer else float(value)

    def describe(self, device: str | None = None) -> str:
        """The help with its unit and default: "micro-batch, samples (default 32; 64 on a GPU)"."""
        show = lambda v: ("on" if v else "off") if isinstance(v, bool) else str(v)  # noqa: E731
        default = "" if self.default in (None, MISSING) else f"default {show(self.default)}"
        if self.gpu is not None and device is None:
            default += f" on a CPU, {show(self.gpu)} on a GPU"
        unit = f", {self.unit}" if self.unit else ""
        listed = ": " + ", ".join(map(show, self.choices)) if self.choices and \
            not self.is_bool and self.canon is None else ""  # with canon: the panel's
        return f"{self.help}{unit}{listed}" + (f" ({default})" if default else "")


def knob(default, help: str = "", **declared) -> object:
    """A spec field declared with its Knob (see Knob for the keywords), or with a Knob shared
    by several specs: knob(CHANNELS_LAST)."""
    declared = default if isinstance(default, Knob) else Knob(default, help, **declared)
    return field(default=declared.default, metadata={"knob": declared})


def knobs(spec_class) -> dict[str, Knob]:
    """Field name -> Knob of every declared field of a spec class (or instance), in order."""
    return {f.name: f.metadata["knob"] for f in fields(spec_class) if "knob" in f.metadata}


def check_knobs(spec) -> None:
    """In a frozen spec's __post_init__: each declared field checked and kept canonical."""
    for name, declared in knobs(spec).items():
        value = getattr(spec, name)
        if value is not None or declared.default is not None:
            object.__setattr__(spec, name, declared.check(name, value))


def levers(spec_class) -> tuple[str, ...]:
    """The fields declared as kernel levers."""
    return tuple(name for name, declared in knobs(spec_class).items() if declared.lever)


def levers_set(spec_class, config: Mapping, skip=()) -> list[str]:
    """"name" (a lever on) or "name value" for each lever of `spec_class` that `config` sets
    away from its default, those in `skip` apart: how a config's label names its levers."""
    out = []
    for name, declared in knobs(spec_class).items():
        value = config.get(name, declared.default)
        if declared.lever and name not in skip and value != declared.default:
            out.append(name if value is True else f"{name} {value}")
    return out


def tuner_axes(spec_class, device: str) -> dict[str, list]:
    """The values a tuner tries per field on `device` (those the device can run)."""
    axes = {}
    for name, declared in knobs(spec_class).items():
        values = declared.tune_gpu if device.startswith("cuda") and declared.tune_gpu \
            else declared.tune
        if values:  # a field with no values to try is never asked what the device runs
            runnable = declared.choices_for(device) if declared.available else values
            axes[name] = [v for v in values if v in runnable]
    return axes


def on_device(spec_class, device: str, **given):
    """A spec of the fields given, the others (and those given as None) at their default on
    `device`."""
    return spec_class(**{name: declared.default_for(device) if given.get(name) is None else
                         given[name] for name, declared in knobs(spec_class).items()})
