"""Optional back ends, detected once (never raising): CUDA through torch, Triton and NVML at
import, torchvision on first use (its import costs about a second).

    if not HAS_TRITON: print(why_unavailable("triton"))
    torchvision_reason()     # "" when torchvision imports beside this torch, else why not
"""

import functools
import importlib.util

from .nvml import NotAvailable, ensure_init


def _cuda_reason() -> str:
    try:
        import torch
    except ImportError as exc:  # torch is a hard dependency, but say so plainly if it is broken
        return f"torch is not importable: {exc}"
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU-only build; install a CUDA build of torch"
    if not torch.cuda.is_available():
        return (f"torch {torch.__version__} was built for CUDA {torch.version.cuda} but sees no "
                "usable GPU (no NVIDIA driver, no device, or CUDA_VISIBLE_DEVICES hides them)")
    return ""


def _triton_reason() -> str:
    if importlib.util.find_spec("triton") is None:
        return "the triton package is not installed (pip install triton, Linux only)"
    return ""


def _nvml_reason() -> str:
    started = ensure_init()
    return started.reason if isinstance(started, NotAvailable) else ""


# back end -> why it is off; an available one has no entry
_REASONS: dict[str, str] = {name: reason for name, reason in (
    ("cuda", _cuda_reason()), ("triton", _triton_reason()), ("nvml", _nvml_reason())) if reason}
HAS_CUDA: bool = "cuda" not in _REASONS
HAS_TRITON: bool = "triton" not in _REASONS
HAS_NVML: bool = "nvml" not in _REASONS


@functools.lru_cache(maxsize=1)
def torchvision_reason() -> str:
    """"" when torchvision imports beside this torch (the ResNet-50 of the report), else why not
    and what to do. PyPI's torchvision wheel does not import beside a CPU-only torch build
    ("operator torchvision::nms does not exist"): the pair must come from one index."""
    if importlib.util.find_spec("torchvision") is None:
        return ("torchvision is not installed: pip install 'a800lab[resnet]' (on a CPU-only "
                "torch take torchvision from the same index as torch, e.g. "
                "https://download.pytorch.org/whl/cpu)")
    try:
        import torchvision.models  # noqa: F401 -- the import is the check
    except Exception as exc:  # noqa: BLE001 -- any failure to import is the reason
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return (f"torchvision is installed but does not import beside torch ({first}); "
                "install the torchvision built for this torch, from the same index")
    return ""


def why_unavailable(name: str) -> str:
    """Why back end `name` ("cuda", "triton" or "nvml") is off; "" when it is available."""
    if name not in ("cuda", "triton", "nvml"):
        raise ValueError(f"unknown back end {name!r}: use 'cuda', 'triton' or 'nvml'")
    return _REASONS.get(name, "")


def resolve_device(device: str = "auto") -> str:
    """Map "auto" to "cuda" when a GPU is usable, else "cpu"; validate explicit choices."""
    if device == "auto":
        return "cuda" if HAS_CUDA else "cpu"
    if device == "cpu":
        return "cpu"
    if device == "cuda" or device.startswith("cuda:"):
        if not HAS_CUDA:
            raise ValueError(f"device {device!r} requested but {why_unavailable('cuda')}; "
                             "use device='cpu' or 'auto'")
        return device
    raise ValueError(f"unknown device {device!r}: use 'auto', 'cpu', 'cuda' or 'cuda:N'")
