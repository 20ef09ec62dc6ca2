"""How long a test's world runs may take: `--xla-timeout`, or `@pytest.mark.xla_timeout(S)`.

The bound is enforced by the backend (the emulated world aborts the run, reports every rank's
stack and replaces the stuck threads; the native one kills and restarts its workers), so a
hang fails one test and the session goes on.
"""

from __future__ import annotations

import pytest

from .options import resolve


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "xla_timeout(seconds): bound on each per-rank run of this test (overrides --xla-timeout)",
    )


def timeout_for(item: pytest.Item) -> float:
    """The marker's bound, else the session's."""
    marker = item.get_closest_marker("xla_timeout")
    if marker is None:
        return resolve(item.config).timeout
    seconds = marker.args[0] if marker.args else marker.kwargs.get("seconds")
    if not isinstance(seconds, (int, float)) or seconds <= 0:
        pytest.fail(
            f"@pytest.mark.xla_timeout needs a positive number of seconds, got {seconds!r}",
            pytrace=False,
        )
    return float(seconds)
