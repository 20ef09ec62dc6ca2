"""What launches are asked to do, through the environment: `xlasim run` and the pytest plugin
set the variables, `World.run_outcomes` reads them (`requested`), and a worker process gets the
answer with its job (`Collect`), not from its own environment."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING

from .interleavings import restart
from .pct import DEFAULT_DEPTH

if TYPE_CHECKING:
    from ..reports.rank_outcome import Collect

RACES_ENV = "XLASIM_RACES"
SCHEDULE_ENV = "XLASIM_SCHEDULE"
#: Where launches under a schedule write their interleavings (default `DEFAULT_DIRECTORY`).
SCHEDULE_DIR_ENV = "XLASIM_SCHEDULE_DIR"
#: What the interleavings' files are named after: the test or script (default "launch").
SCHEDULE_NAME_ENV = "XLASIM_SCHEDULE_NAME"
#: PCT's depth (docs/races.md; default `schedule.DEFAULT_DEPTH`).
SCHEDULE_DEPTH_ENV = "XLASIM_SCHEDULE_DEPTH"
DEFAULT_DIRECTORY = os.path.join(".xlasim", "schedules")


def requested(collect: Collect) -> Collect:
    """`collect` with what this process's environment asks of launches (detection, a
    schedule).

    Args:
        collect: what the launch collects otherwise.
    """
    detect = os.environ.get(RACES_ENV, "") not in ("", "0")
    seed = os.environ.get(SCHEDULE_ENV, "")
    if not detect and not seed:
        return collect
    return dataclasses.replace(collect, races=detect, schedule=int(seed) if seed else None)


@contextmanager
def variable(name: str, value: str | None) -> Iterator[None]:
    """The environment variable `name` is `value` (None: unset) inside, as before after.

    Args:
        name: the variable.
        value: its value inside.
    """
    before = os.environ.get(name)
    _set(name, value)
    try:
        yield
    finally:
        _set(name, before)


def _set(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def schedule_directory() -> str:
    """Where this process's launches write their interleavings."""
    return os.environ.get(SCHEDULE_DIR_ENV) or DEFAULT_DIRECTORY


def schedule_name() -> str:
    """What this process's launches' interleavings are named after."""
    return os.environ.get(SCHEDULE_NAME_ENV) or "launch"


def schedule_depth() -> int:
    """PCT's depth for this process's launches."""
    return int(os.environ.get(SCHEDULE_DEPTH_ENV) or DEFAULT_DEPTH)


@contextmanager
def named(name: str) -> Iterator[None]:
    """Launches inside write their interleavings under `name` (a test, a script, a program),
    starting its files anew: each launch is compared with the one recorded before.

    Args:
        name: the test or script.
    """
    restart(name)
    with variable(SCHEDULE_NAME_ENV, name):
        yield


def detecting() -> AbstractContextManager[None]:
    """Launches inside detect races."""
    return variable(RACES_ENV, "1")


def scheduled(seed: int | None) -> AbstractContextManager[None]:
    """Launches inside follow schedule `seed` (None: no schedule).

    Args:
        seed: the schedule's seed.
    """
    return variable(SCHEDULE_ENV, None if seed is None else str(seed))
