"""Where the guide's TensorFlow snippets run: a virtual environment of their own, never the lab's
(TensorFlow pins its own protobuf, ml-dtypes and h5py ranges, and its GPU wheels their own CUDA
libraries beside torch's), at ~/.cache/a800lab/tf-venv ($A800LAB_TF_VENV). The snippets run in
a subprocess anyway; `python -m a800lab report --tf-env` prepares the environment, CI too.

    tf_python()          # a Python that imports TensorFlow, or None
    tf_missing()         # "" or how to install it, in one line
    prepare_tf_env()     # create the venv and pip-install TensorFlow into it (minutes)
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

from ..core.store import cache_path

# pyproject.toml's `tf` extra (a test keeps the two one); GPU boxes get the CUDA build
TF_REQUIREMENT = "tensorflow-cpu>=2.16,<2.22"
GPU_REQUIREMENT = "tensorflow[and-cuda]>=2.16,<2.22"
INSTALL = "python -m a800lab report --tf-env"


def venv_path() -> Path:
    """$A800LAB_TF_VENV, else ~/.cache/a800lab/tf-venv."""
    return cache_path("A800LAB_TF_VENV", "tf-venv")


def _python_of(root: Path) -> Path:
    return root / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


def tf_python() -> str | None:
    """The venv's Python when TensorFlow is installed in it, else this Python when TensorFlow
    is installed beside the lab (the `tf` extra), else None."""
    python = _python_of(venv_path())
    if python.exists() and any(venv_path().glob("lib*/python*/site-packages/tensorflow")):
        return str(python)
    return sys.executable if importlib.util.find_spec("tensorflow") else None


def tf_missing() -> str:
    """"" when TensorFlow is at hand, else how to install it."""
    if tf_python():
        return ""
    return (f"TensorFlow is not installed: `{INSTALL}` prepares {venv_path()} "
            f"({TF_REQUIREMENT}; tensorflow[and-cuda] on a GPU box), then run the report again")


def prepare_tf_env(gpu: bool = False, *, run=subprocess.run) -> Path:
    """Create the venv (if missing) and install TensorFlow into it: the CPU build, or the CUDA
    one with `gpu`. Returns the venv's folder; a failed pip raises CalledProcessError."""
    root = venv_path()
    if not _python_of(root).exists():
        run([sys.executable, "-m", "venv", str(root)], check=True)
    run([str(_python_of(root)), "-m", "pip", "install", "--quiet",
         GPU_REQUIREMENT if gpu else TF_REQUIREMENT], check=True)
    return root
