"""Tests of strategy/: the per-rank ones run with `pytest --xla-devices=8` (emulated) or natively."""

import sys
from pathlib import Path

# `fixtures` (models and data) lives at the repository root, next to `strategy`.
ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
