#!/usr/bin/env bash
# gpu_check's rehearsal in a venv shaped like the lent GPU machine's Python side: Triton 3.6.0,
# torch (this machine's CPU build; the lent one has 2.11 with CUDA 13), numpy, pandas, matplotlib,
# nvidia-ml-py, pytest, pyyaml; no ipywidgets, IPython or JupyterLab; the lab from this checkout.
# Usage: scripts/rehearse_lent_stack.sh [VENV]   (default build/lent-stack; about 2 minutes the
# first time). Exit status: the rehearsal's (0 passed).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-build/lent-stack}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check torch==2.13.0 triton==3.6.0 \
  numpy pandas matplotlib nvidia-ml-py pytest pyyaml
for module in ipywidgets IPython jupyterlab; do
  if "$venv/bin/python" -c "import $module" 2>/dev/null; then
    echo "rehearsal venv has $module, which the lent stack lacks" >&2; exit 1
  fi
done
PYTHONPATH="$PWD" "$venv/bin/python" scripts/gpu_check.py --rehearse
