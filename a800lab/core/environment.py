"""The environment a measurement came from (versions, device, mode) and a short fingerprint
of it: every record carries both, so a resumed sweep skips only points measured here.

    env = environment("cuda:1"); fingerprint(env)   # "3f2a9c01b7de"
"""

import functools
import hashlib
import json
import platform
import socket

import torch

from .backends import HAS_CUDA
from .nvml import nvml_call, or_none
from .precision import tf32_settings

# Keys that identify "the same environment" for resume; free-form extras do not change it.
_FINGERPRINT_KEYS = ("hostname", "device_name", "device_count", "torch", "cuda", "driver",
                     "python")


def environment(device: str | None = None) -> dict:
    """Machine and software facts for a result record; with `device` ("cpu", "cuda[:N]") the
    device name is that device's and "device" and "mode" say where the points ran. The TF32
    settings are read anew each call: they change float32 results, not the machine."""
    env = dict(_machine())
    env.update({key: value for key, value in tf32_settings().items() if key != "tf32_api"})
    if device is not None:
        on_cuda = device.startswith("cuda")
        env.update(device=device, mode="GPU" if on_cuda else "CPU fallback",
                   device_name=torch.cuda.get_device_name(device) if on_cuda
                   else f"CPU: {env['cpu_model']}")
    return env


@functools.lru_cache(maxsize=1)
def _machine() -> dict:
    env = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if HAS_CUDA else None,
        "nccl": nccl_version() if HAS_CUDA else None,
        "driver": or_none(nvml_call("nvmlSystemGetDriverVersion")),
        "cpu_model": cpu_model(),
        "device_count": torch.cuda.device_count() if HAS_CUDA else 0,
    }
    env["device_name"] = torch.cuda.get_device_name(0) if HAS_CUDA else f"CPU: {env['cpu_model']}"
    return env


def fingerprint(env: dict) -> str:
    """12 hex characters identifying machine + software (the resume key)."""
    stable = {key: env.get(key) for key in _FINGERPRINT_KEYS}
    return hashlib.sha256(json.dumps(stable, sort_keys=True).encode()).hexdigest()[:12]


def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo, else platform.processor()."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def nccl_version() -> str | None:
    """The NCCL torch bundles ("2.21.5"), None when this torch build has none."""
    try:
        version = torch.cuda.nccl.version()
    except (AttributeError, RuntimeError, TypeError):  # CPU build: torch._C has no _nccl_version
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
