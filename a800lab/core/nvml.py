"""The one NVML wrapper: every NVML call goes through `nvml_call`; no library, no driver and
"not supported" all come back as NotAvailable(reason), never as an exception (in JSON:
{"available": false, "reason": ...}). Tests pass a fake module through `nvml=`.

    power_mw = nvml_call("nvmlDeviceGetPowerUsage", handle)   # int or NotAvailable (falsy)
"""

import dataclasses
import threading
from typing import Any

# Throttle ("clocks event") reasons, in NVML bit order: (our name, suffix of the NVML constant).
# The bit values are read from the module: nvmlClocksEventReason<suffix> (newer drivers) or
# nvmlClocksThrottleReason<suffix> (older pynvml).
_THROTTLE_REASONS = (
    ("gpu_idle", "GpuIdle"), ("applications_clocks_setting", "ApplicationsClocksSetting"),
    ("sw_power_cap", "SwPowerCap"), ("hw_slowdown", "HwSlowdown"), ("sync_boost", "SyncBoost"),
    ("sw_thermal_slowdown", "SwThermalSlowdown"), ("hw_thermal_slowdown", "HwThermalSlowdown"),
    ("hw_power_brake", "HwPowerBrakeSlowdown"), ("display_clock_setting", "DisplayClockSetting"),
    # 0x200 and 0x400: pynvml has only their throttle-prefixed names
    ("board_limit", "BoardLimit"), ("reliability", "Reliability"),
)
# NVML field value types -> the member of the value union that holds the number
_VALUE_MEMBERS = {"NVML_VALUE_TYPE_DOUBLE": "dVal", "NVML_VALUE_TYPE_UNSIGNED_INT": "uiVal",
                  "NVML_VALUE_TYPE_UNSIGNED_LONG": "ulVal",
                  "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG": "ullVal",
                  "NVML_VALUE_TYPE_SIGNED_LONG_LONG": "sllVal",
                  "NVML_VALUE_TYPE_SIGNED_INT": "siVal", "NVML_VALUE_TYPE_UNSIGNED_SHORT": "usVal"}
# nvmlDeviceGetPowerUsage is documented as a 1 s average on Ampere other than GA100 (8.0) and
# newer, and as instantaneous on GA100 and older
_AVERAGED_POWER_FROM = (8, 1)


@dataclasses.dataclass(frozen=True)
class NotAvailable:
    """A value NVML (or torch) could not give, with the reason. Falsy."""

    reason: str

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"n/a ({self.reason})"

    __str__ = __repr__

    def to_dict(self) -> dict:
        """The JSON form used everywhere: {"available": False, "reason": ...}."""
        return {"available": False, "reason": self.reason}


def is_not_available(value: Any) -> bool:
    """True for a NotAvailable or its serialised form {"available": False, "reason": ...}."""
    return isinstance(value, NotAvailable) or (
        isinstance(value, dict) and value.get("available") is False and "reason" in value)


def or_none(value: Any) -> Any:
    """`value`, or None for a NotAvailable (or its JSON form)."""
    return None if is_not_available(value) else value


def to_jsonable(value: Any) -> Any:
    """Turn NotAvailable, dataclasses (via to_dict), tuples and bytes into JSON-ready values."""
    if hasattr(value, "to_dict") and dataclasses.is_dataclass(value):
        return value.to_dict()
    if isinstance(value, dict):
        return {str(key): to_jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(item) for item in value]
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value


_lock = threading.Lock()
_real_module: Any = None  # pynvml once imported, or NotAvailable when the import failed
# Init outcome per module object (the real pynvml or a fake), keyed by id(module):
# (module, None) = ready, (module, NotAvailable) = failed. Holding the module keeps its id unique.
_init_results: dict[int, tuple[Any, NotAvailable | None]] = {}


def _default_module() -> Any:
    global _real_module
    with _lock:
        if _real_module is None:
            try:
                import pynvml
            except ImportError as exc:
                _real_module = NotAvailable(
                    f"no NVML library: pynvml is not importable ({exc}); "
                    "pip install nvidia-ml-py")
            else:
                _real_module = pynvml
        return _real_module


def ensure_init(nvml: Any = None) -> Any:
    """The initialised NVML module (real pynvml or the given fake), or NotAvailable saying why;
    nvmlInit runs once per module object and a failure is remembered."""
    module = _default_module() if nvml is None else nvml
    if isinstance(module, NotAvailable):
        return module
    with _lock:
        if id(module) not in _init_results:
            try:
                module.nvmlInit()
            except module.NVMLError as exc:
                _init_results[id(module)] = (module, NotAvailable(
                    f"no NVIDIA driver: nvmlInit failed ({exc}); install or load the NVIDIA "
                    "driver, or run on a machine with an NVIDIA GPU"))
            else:
                _init_results[id(module)] = (module, None)
        failure = _init_results[id(module)][1]
    return module if failure is None else failure


def nvml_call(fn_name: str, *args: Any, nvml: Any = None) -> Any:
    """Call NVML function `fn_name(*args)`; any NVML failure comes back as NotAvailable, byte
    strings as str. Programming errors (wrong argument types) still raise."""
    for arg in args:
        if isinstance(arg, NotAvailable):
            return arg
    module = ensure_init(nvml)
    if isinstance(module, NotAvailable):
        return module
    fn = getattr(module, fn_name, None)
    if fn is None:
        return NotAvailable(f"{fn_name} is not in this pynvml; pip install -U nvidia-ml-py")
    try:
        result = fn(*args)
    except module.NVMLError as exc:
        return NotAvailable(f"{fn_name}: {exc}")
    return result.decode(errors="replace") if isinstance(result, bytes) else result


def nvml_const(name: str, nvml: Any = None) -> Any:
    """An NVML constant (e.g. "NVML_CLOCK_SM") from the module, or NotAvailable."""
    module = _default_module() if nvml is None else nvml
    if isinstance(module, NotAvailable):
        return module
    if not hasattr(module, name):
        return NotAvailable(f"{name} is not in this pynvml; pip install -U nvidia-ml-py")
    return getattr(module, name)


def device_handle(index: int, nvml: Any = None) -> Any:
    """The NVML handle of GPU `index` (NVML order = PCI bus order), or NotAvailable."""
    return nvml_call("nvmlDeviceGetHandleByIndex", index, nvml=nvml)


def device_count(nvml: Any = None) -> Any:
    """Number of GPUs NVML sees (ignores CUDA_VISIBLE_DEVICES), or NotAvailable."""
    return nvml_call("nvmlDeviceGetCount", nvml=nvml)


def decode_throttle_reasons(mask: int, nvml: Any = None) -> list[str]:
    """Names of the reasons set in a clocks-event bitmask, e.g. ["sw_power_cap", "gpu_idle"]."""
    module = _default_module() if nvml is None else nvml
    bits = {name: getattr(module, "nvmlClocksEventReason" + suffix,
                          getattr(module, "nvmlClocksThrottleReason" + suffix, None))
            for name, suffix in _THROTTLE_REASONS}
    return [name for name, bit in bits.items() if bit is not None and mask & bit]


def throttle_reasons(handle: Any, nvml: Any = None) -> Any:
    """Current throttle reasons of a GPU as a list of names (empty: full speed), or NotAvailable."""
    mask = nvml_call("nvmlDeviceGetCurrentClocksEventReasons", handle, nvml=nvml)
    if isinstance(mask, NotAvailable):
        # Drivers/pynvml before the "clocks event" rename only have the throttle name.
        older = nvml_call("nvmlDeviceGetCurrentClocksThrottleReasons", handle, nvml=nvml)
        if isinstance(older, NotAvailable):
            return mask
        mask = older
    return decode_throttle_reasons(int(mask), nvml=nvml)


def temperature_c(handle: Any, nvml: Any = None) -> Any:
    """GPU core temperature in C: nvmlDeviceGetTemperatureV, else the deprecated
    nvmlDeviceGetTemperature (older drivers or pynvml); NotAvailable when neither answers."""
    sensor = nvml_const("NVML_TEMPERATURE_GPU", nvml)
    reading = nvml_call("nvmlDeviceGetTemperatureV", handle, sensor, nvml=nvml)
    if isinstance(reading, NotAvailable):
        older = nvml_call("nvmlDeviceGetTemperature", handle, sensor, nvml=nvml)
        return reading if isinstance(older, NotAvailable) else older
    return reading


def field_value(handle: Any, field: str, nvml: Any = None) -> Any:
    """One NVML field value of a GPU (e.g. "NVML_FI_DEV_POWER_INSTANT"), or NotAvailable when
    NVML answers that field with an error."""
    values = nvml_call("nvmlDeviceGetFieldValues", handle, [nvml_const(field, nvml)], nvml=nvml)
    if isinstance(values, NotAvailable):
        return values
    value = values[0]
    if value.nvmlReturn != nvml_const("NVML_SUCCESS", nvml):
        why = nvml_call("nvmlErrorString", value.nvmlReturn, nvml=nvml)
        return NotAvailable(f"{field}: {why or f'NVML error {value.nvmlReturn}'}")
    members = {nvml_const(kind, nvml): member for kind, member in _VALUE_MEMBERS.items()}
    if value.valueType not in members:
        return NotAvailable(f"{field}: unknown NVML value type {value.valueType}")
    return getattr(value.value, members[value.valueType])


def power_reading(handle: Any, nvml: Any = None) -> tuple[Any, Any]:
    """(board power in W, its source), both NotAvailable without a power reading. The source is
    "instant" (the NVML_FI_DEV_POWER_INSTANT field), "average_1s" (PowerUsage where NVML documents
    it as the last second's average: compute capability above 8.0) or "power_usage" (PowerUsage,
    instantaneous on GA100 / A800 and older, or on an unknown architecture)."""
    instant_mw = field_value(handle, "NVML_FI_DEV_POWER_INSTANT", nvml)
    if not isinstance(instant_mw, NotAvailable):
        return instant_mw / 1000.0, "instant"
    usage_mw = nvml_call("nvmlDeviceGetPowerUsage", handle, nvml=nvml)
    if isinstance(usage_mw, NotAvailable):
        return usage_mw, usage_mw
    capability = nvml_call("nvmlDeviceGetCudaComputeCapability", handle, nvml=nvml)
    averaged = not isinstance(capability, NotAvailable) and \
        tuple(capability) >= _AVERAGED_POWER_FROM
    return usage_mw / 1000.0, "average_1s" if averaged else "power_usage"


def milli_to_unit(value: Any) -> Any:
    """NVML milli-units (mW) to units (W); NotAvailable passes through."""
    return value if isinstance(value, NotAvailable) else value / 1000.0


def cuda_version_string(version: Any) -> Any:
    """NVML's integer CUDA version (12020) as "12.2"; NotAvailable passes through."""
    if isinstance(version, NotAvailable):
        return version
    return f"{version // 1000}.{(version % 1000) // 10}"
