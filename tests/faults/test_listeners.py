"""No socket of a multi-process world listens outside loopback: the `xla://` store's keys are
the ranks' rendezvous, and nothing off this machine may read or write them."""

from __future__ import annotations

import os

import cells
import pytest
from procs import descendants
from topologies import params, topology

from xlasim.ranks.world import World

LISTEN = "0A"
LOOPBACK = ("0100007F", "00000000000000000000000001000000", "0000000000000000FFFF00000100007F")


def _socket_inodes(pids: set[int]) -> set[str]:
    inodes = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    return inodes


def _listening(inodes: set[str]) -> list[tuple[str, str]]:
    """(table, local address) of every TCP socket among `inodes` that listens."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                if fields[3] == LISTEN and fields[9] in inodes:
                    found.append((table, fields[1]))
    return found


@pytest.mark.parametrize("name", [p for p in params() if p.values[0] != "threads"])
def test_no_socket_of_a_multi_process_world_listens_outside_loopback(name):
    world = World(topology(name), collective_timeout=5.0)
    try:
        world.run(cells.uses_the_store, timeout=60)  # the xla:// store has served its clients
        pids = {os.getpid()} | descendants(os.getpid())
        listening = _listening(_socket_inodes(pids))
        assert listening, "the world's xla:// store should listen somewhere"
        outside = [(t, a) for t, a in listening if a.split(":")[0] not in LOOPBACK]
        assert outside == []
    finally:
        world.close()
