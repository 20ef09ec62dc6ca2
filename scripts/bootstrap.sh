#!/usr/bin/env bash
# Create .venv (once per machine) and install xlasim with its test, dev, lightning, trace and
# huggingface extras into it (lightning: CI's Lightning smoke test, tests/lightning; ~8 s and
# ~35 MB on top of torch; trace: matplotlib and Holistic Trace Analysis for tests/traces, ~15 s;
# huggingface: transformers + accelerate for tests/huggingface, ~10 s and ~165 MB).
# Re-installs only when pyproject.toml changed, so a warm machine pays nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$python" -m venv .venv
fi
stamp=.venv/.xlasim-installed
wanted=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ]; then
    echo "bootstrap: installing torch 2.9.0 + torch_xla 2.9.0 and test tools into .venv (~2 min, ~7 GB)" >&2
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e '.[dev,lightning,trace,huggingface]'
    echo "$wanted" > "$stamp"
fi
