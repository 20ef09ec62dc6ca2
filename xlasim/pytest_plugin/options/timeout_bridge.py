"""pytest-timeout's timer, taken over for tests whose body runs on ranks (the bound goes to
the world's runs: `timeouts.timeout_for`; why, in `timeouts`)."""

from __future__ import annotations

import pytest

from .timeouts import pytest_timeout_key


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: object) -> bool | None:
    """pytest-timeout's bound on a test whose body runs on ranks: the world's runs enforce it
    (`timeout_for`), and pytest-timeout sets no alarm of its own. Other tests: pytest-timeout's.

    Args:
        item: the test pytest-timeout is about to time.
        settings: pytest-timeout's settings for it (`timeout` in seconds, 0 or None for none).
    """
    seconds = getattr(settings, "timeout", None)
    if not seconds or item.get_closest_marker("xla") is None:
        return None
    item.stash[pytest_timeout_key] = float(seconds)
    return True
