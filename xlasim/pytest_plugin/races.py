"""`--xla-races` and `--xla-schedule`: what every launch of the session does (the core reads
them from the environment, as `xlasim run` sets them; `--xla-schedules` is a loop around each
test's ranks, in `session.run_ranks`)."""

from __future__ import annotations

import pytest

from ..races.settings import RACES_ENV, SCHEDULE_ENV, variable


def pytest_configure(config: pytest.Config) -> None:
    wanted = {}
    if config.getoption("xla_races", False):
        wanted[RACES_ENV] = "1"
    if config.getoption("xla_schedule", None) is not None:
        wanted[SCHEDULE_ENV] = str(config.getoption("xla_schedule"))
    for name, value in wanted.items():
        setting = variable(name, value)
        setting.__enter__()
        config.add_cleanup(lambda setting=setting: setting.__exit__(None, None, None))
