"""How long a test's world runs may take: `--xla-timeout`, or the test's marker
(`@pytest.mark.xla(timeout=S)`, `@pytest.mark.xla_timeout(S)`).

The bound is enforced by the backend (the emulated world aborts the run, reports every rank's
stack and replaces the stuck threads; the native one kills and restarts its workers), so a
hang fails one test and the session goes on.
"""

from __future__ import annotations

import pytest

from . import marker_args
from .settings import resolve


def timeout_for(item: pytest.Item) -> float:
    """The closest marker's bound (`xla(timeout=...)` or `xla_timeout(...)`), else the
    session's. Markers were checked at collection (`markers`)."""
    for mark in item.iter_markers():
        if mark.name in ("xla", "xla_timeout"):
            seconds = marker_args.timeout(mark)
            if seconds is not None:
                return seconds
    return resolve(item.config).timeout
