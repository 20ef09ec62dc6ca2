"""Simulated machines for the pod tests: network namespaces made by the test (docs/pods.md)."""

from __future__ import annotations

import pytest

from fixtures.namespaces import Machines, require


@pytest.fixture
def machines():
    """`machines(count)` makes `count` machines, each in a namespace of its own (skips naming
    why where namespaces cannot be made, fails so in CI); all are removed, with their
    processes, at the end."""
    require()
    made: list[Machines] = []

    def make(count: int) -> Machines:
        made.append(Machines(count))
        return made[-1]

    yield make
    for each in made:
        each.close()
