"""The three shapes a slice is emulated in, as the fault tests run them."""

from __future__ import annotations

import pytest

from xlasim.base.topology import Topology

#: name -> (devices, processes, hosts)
SHAPES = {
    "threads": (4, 1, 1),  # every core a thread of the launching process
    "processes": (4, 4, 1),  # a worker process per core
    "hosts": (8, 4, 2),  # 2 cores per process, 2 processes per host, 2 hosts
}


def topology(name: str) -> Topology:
    devices, processes, hosts = SHAPES[name]
    return Topology(devices, processes=processes, hosts=hosts)


def params(slow: tuple[str, ...] = ()) -> list:
    """One pytest param per topology; those named in `slow` are marked slow (see conftest)."""
    return [
        pytest.param(name, id=name, marks=[pytest.mark.slow] if name in slow else [])
        for name in SHAPES
    ]
