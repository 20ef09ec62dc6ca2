"""How long a test's world runs may take: `--xla-timeout`, or the test's marker
(`@pytest.mark.xla(timeout=S)`, `@pytest.mark.xla_timeout(S)`).

The bound is enforced by the backend (the emulated world aborts the run, reports every rank's
stack and replaces the stuck threads; the native one kills and restarts its workers), so a
hang fails one test and the session goes on.

pytest-timeout's `--timeout` (its `timeout` marker, `PYTEST_TIMEOUT`) bounds a marked test too:
its alarm would interrupt the pytest process while the ranks run on, with no rank's stack and
a world left mid-run. So for a test whose body runs on ranks this plugin takes over the timer
(`timeout_bridge`, pytest-timeout's `pytest_timeout_set_timer` hook) and enforces the shorter of
the two bounds as the world's: a rank that hangs past it gets every rank's stack, and the world
is reused.
"""

from __future__ import annotations

import pytest

from . import marker_args
from .settings import resolve

#: pytest-timeout's bound of a test whose world runs enforce it (`pytest_timeout_set_timer`).
pytest_timeout_key = pytest.StashKey[float]()


def timeout_for(item: pytest.Item) -> float:
    """The closest marker's bound (`xla(timeout=...)` or `xla_timeout(...)`), else the
    session's. Markers were checked at collection (`markers`)."""
    own = resolve(item.config).timeout
    for mark in item.iter_markers():
        if mark.name in ("xla", "xla_timeout"):
            seconds = marker_args.timeout(mark)
            if seconds is not None:
                own = seconds
                break
    return min(own, item.stash.get(pytest_timeout_key, own))
