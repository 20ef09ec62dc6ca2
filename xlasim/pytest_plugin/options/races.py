"""`--xla-races` and `--xla-schedule`: what every launch of the session does (the core reads
them from the environment, as `xlasim run` sets them; `--xla-schedules` is a loop around each
test's ranks, in `session.run_ranks`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ...races import refused_on_a_pod
from ...races.launch_requests import RACES_ENV, SCHEDULE_DIR_ENV, SCHEDULE_ENV, variable
from .. import session
from .settings import resolve


@pytest.hookimpl(tryfirst=True)  # before the session's world starts, or joins its pod
def pytest_configure(config: pytest.Config) -> None:
    _refuse_schedules_on_a_pod(config)
    wanted = {}
    if config.getoption("xla_races", False):
        wanted[RACES_ENV] = "1"
    if config.getoption("xla_schedule", None) is not None:
        wanted[SCHEDULE_ENV] = str(config.getoption("xla_schedule"))
    scheduling = wanted.get(SCHEDULE_ENV) or config.getoption("xla_schedules", None)
    if scheduling and not os.environ.get(SCHEDULE_DIR_ENV):
        wanted[SCHEDULE_DIR_ENV] = str(_schedule_directory(config))
    for name, value in wanted.items():
        setting = variable(name, value)
        setting.__enter__()
        config.add_cleanup(lambda setting=setting: setting.__exit__(None, None, None))


def _refuse_schedules_on_a_pod(config: pytest.Config) -> None:
    """A schedule on a pod of several machines is a usage error before any rank starts, as
    `xlasim run` refuses it (docs/races.md, "Pods")."""
    asked = [
        flag
        for flag, value in (
            ("--xla-schedule", config.getoption("xla_schedule", None)),
            ("--xla-schedules", config.getoption("xla_schedules", None)),
        )
        if value
    ]
    if asked and session.is_active(config) and resolve(config).pod is not None:
        raise pytest.UsageError(f"xlasim: {refused_on_a_pod(' and '.join(asked))}")


def _schedule_directory(config: pytest.Config) -> Path:
    """Where the tests' interleavings are written: pytest's cache, else `.xlasim/schedules`
    under the root directory."""
    cache = getattr(config, "cache", None)
    if cache is not None:
        return cache.mkdir("xlasim-schedules")
    return config.rootpath / ".xlasim" / "schedules"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """How many distinct interleavings the session's schedules took, over its tests."""
    if not session.explored:
        return
    schedules = sum(c.schedules for c in session.explored.values())
    distinct = sum(c.distinct for c in session.explored.values())
    terminalreporter.write_line(
        f"xlasim: {len(session.explored)} test(s) explored: {schedules} schedule(s) took "
        f"{distinct} distinct interleaving(s) (docs/races.md)"
    )
