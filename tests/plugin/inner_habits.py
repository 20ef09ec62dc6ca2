"""pytest's everyday options on marked tests (issue 33 item 5): run by test_plugin_habits.py."""

import threading

import pytest


@pytest.mark.xla
def test_passes(xla_rank):
    assert 0 <= xla_rank.rank < xla_rank.world_size


@pytest.mark.xla
def test_fails_on_rank_1(xla_rank):
    secret = xla_rank.rank * 10
    assert xla_rank.rank != 1, f"rank one is broken ({secret})"


@pytest.mark.xla
def test_hangs_on_rank_0(xla_rank):
    if xla_rank.rank == 0:
        threading.Event().wait()  # bounded by pytest-timeout's --timeout


@pytest.mark.xla
def test_after_the_hang(xla_rank):
    assert xla_rank.world_size == 2
