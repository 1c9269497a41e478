"""Whether a CUDA runtime runs on a driver, by NVIDIA's CUDA Compatibility guide ("minor
version compatibility": any 11.x on driver >= 450.80.02, 12.x on >= 525.60.13, 13.x on >= 580;
forward compatibility needs the cuda-compat package on data-center GPUs).

    cuda_runtime_problem("12.4", "12.2", "535.129.03")   # "": minor version compatibility
"""

from typing import Any

# major CUDA release -> the oldest driver (major, minor) of its minor-version compatibility
MINOR_COMPAT_MIN_DRIVER = {11: (450, 80), 12: (525, 60), 13: (580, 0)}


def version_tuple(text: Any) -> tuple[int, ...] | None:
    """"12.4" -> (12, 4), "535.129.03" -> (535, 129); None for anything else (None, "n/a")."""
    if not isinstance(text, str):
        return None
    try:
        return tuple(int(part) for part in text.split(".")[:2])
    except ValueError:
        return None


def cuda_runtime_problem(torch_cuda: Any, driver_cuda: Any, driver: Any) -> str:
    """Why a torch built for CUDA `torch_cuda` may not run on driver `driver` (which supports
    CUDA up to `driver_cuda`), with what to do; "" when it runs (or a version is unknown)."""
    built, supported = version_tuple(torch_cuda), version_tuple(driver_cuda)
    if not built or not supported or built <= supported:
        return ""
    minimum = MINOR_COMPAT_MIN_DRIVER.get(built[0])
    have = version_tuple(driver)
    if built[0] == supported[0] and (minimum is None or have is None or have >= minimum):
        return ""   # same major release: minor version compatibility
    need = f"{minimum[0]}.{minimum[1]:02d}" if minimum else f"one that supports CUDA {built[0]}"
    return (f"torch was built for CUDA {torch_cuda} but driver {driver} supports CUDA up to "
            f"{driver_cuda}, an older major release: CUDA may not start. Install a driver >= "
            f"{need} (CUDA {built[0]}.x runs on it by minor version compatibility), a torch "
            f"build for CUDA {supported[0]}.x, or, on a data-center GPU, NVIDIA's "
            "forward-compatibility package (cuda-compat)")
