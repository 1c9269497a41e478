#!/usr/bin/env bash
# gpu_check's rehearsal in a venv shaped like the lent GPU machine's Python side: Python 3.12,
# torch 2.11.0 (PyPI's build for CUDA 13, as lent; ~5 GB with its CUDA libraries, no GPU needed
# to import it), Triton 3.6.0, numpy, pandas, matplotlib, nvidia-ml-py, pytest, pyyaml; no
# ipywidgets, IPython or JupyterLab; the lab from this checkout.
# Usage: scripts/rehearse_lent_stack.sh [VENV]   (default build/lent-stack; a few minutes the
# first time). Python 3.12 is looked for as python3.12 on PATH, then in pyenv's versions (uv's
# `uv python install` downloads from outside the package registries: not here); without it the
# rehearsal runs on python3 and says so. Exit status: the rehearsal's (0 passed).
#
# What it cannot catch: anything that runs only on a card (kernels launched, timings, CUDA
# graphs captured, NCCL, NVML readings, the driver's limits): the checks themselves judge those.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-build/lent-stack}
find_python() {  # the first Python 3.12 that runs (a pyenv shim may not)
  local root candidate
  root=$( (command -v pyenv >/dev/null && pyenv root) || echo "$HOME/.pyenv")
  for candidate in python3.12 $(ls -d "$root"/versions/3.12*/bin/python3.12 2>/dev/null |
                               sort -rV); do
    if "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
      command -v "$candidate"; return
    fi
  done
}
python=$(find_python || true)
if [ -z "$python" ]; then
  python=python3
  echo "no Python 3.12 here (the lent stack's): rehearsing on $($python --version)" >&2
fi
if [ ! -x "$venv/bin/python" ] || { [[ "$python" == *3.12 ]] &&
    ! "$venv/bin/python" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; }
then
  "$python" -m venv --clear "$venv"  # (again) on the lent stack's Python
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check torch==2.11.0 triton==3.6.0 \
  numpy pandas matplotlib nvidia-ml-py pytest pyyaml
for module in ipywidgets IPython jupyterlab; do
  if "$venv/bin/python" -c "import $module" 2>/dev/null; then
    echo "rehearsal venv has $module, which the lent stack lacks" >&2; exit 1
  fi
done
PYTHONPATH="$PWD" "$venv/bin/python" scripts/gpu_check.py --rehearse
