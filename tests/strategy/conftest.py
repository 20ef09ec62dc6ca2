"""Tests of strategy/: the per-rank ones run with `pytest --xla-devices=8` (emulated) or natively."""

import sys
from pathlib import Path

import pytest

import xlasim

# `fixtures` (models and data) lives at the repository root, next to `strategy`.
ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture
def emulation_only() -> None:
    """Skip a test that launches a world (or uses a device) from the pytest process itself: on
    the native backend the session's workers hold the chips, and torch_xla refuses to spawn
    once this process has used a device."""
    if not xlasim.is_emulated():
        pytest.skip("launches from the pytest process, which only emulation allows")
