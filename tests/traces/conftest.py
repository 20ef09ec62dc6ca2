"""Worlds and a helper for the tracing tests: a launch recorded into a directory of the test's."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from xlasim.base.topology import Topology
from xlasim.events.recorder import TRACE_ENV
from xlasim.ranks.world import World

#: Worker processes on two emulated hosts: the isolated mode, with hosts to label.
ISOLATED = Topology(4, processes=4, hosts=2)


@pytest.fixture(scope="session")
def isolated() -> Iterator[World]:
    pod = World(ISOLATED, collective_timeout=30.0)
    yield pod
    pod.close()


@pytest.fixture
def record(monkeypatch) -> Callable[..., Path]:
    """`record(world, fn, args, directory, size=4)`: run `fn` on the world's first `size` ranks
    with tracing into `directory`, and return it (the run's own error propagates)."""

    def run(
        world: World, fn: Callable[..., Any], args: Sequence[Any], directory: Path, size: int = 4
    ) -> Path:
        with monkeypatch.context() as patched:
            patched.setenv(TRACE_ENV, str(directory))
            world.run(fn, args, size=size)
        return directory

    return run
