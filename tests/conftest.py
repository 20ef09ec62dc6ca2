"""Fixtures of the emulator's own tests (tests/core, tests/conformance): they build on the
core's world directly, so they need emulation in this process (they skip on a real TPU)."""

import os
from collections.abc import Iterator

import pytest

import xlasim
from xlasim.topology import Topology

CORE_DEVICES = 8


def _why_not_here(config) -> str | None:
    """Why this session cannot run the emulator's own tests, or None when it can."""
    if os.environ.get("PJRT_DEVICE", "CPU").startswith("TPU"):
        return "xlasim's own tests need emulation, not a TPU"
    if config.pluginmanager.has_plugin("xlasim"):
        from xlasim.pytest_plugin.activation import backend_key

        if config.stash.get(backend_key, "emulated") == "native":
            return "xlasim's own tests need emulation; this session runs the native backend"
    return None


#: Directories whose tests drive the core's world from this process.
EMULATOR_TESTS = ("tests/core/", "tests/conformance/")


def pytest_collection_modifyitems(config, items):
    reason = _why_not_here(config)
    if reason is not None:
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if any(part in item.path.as_posix() for part in EMULATOR_TESTS):
                item.add_marker(skip)


@pytest.fixture(scope="session")
def world() -> Iterator[xlasim.World]:
    """8 rank threads in this process (the fast mode), for tests of the emulator's mechanics:
    their rank functions may be closures, and they can watch the ranks' threads. The session's
    own world (`xlasim.world()`, one process per core by default) is the one launchers use."""
    if not xlasim.is_emulated():
        xlasim.emulate(devices=int(os.environ.get("XLASIM_DEVICES", CORE_DEVICES)))
    session = xlasim.world()
    if session.topology.threaded and session.size >= CORE_DEVICES:
        yield session
        return
    here = xlasim.activation.topology().cores_per_host
    if here < CORE_DEVICES:
        pytest.skip(
            f"the emulator's own tests need {CORE_DEVICES} cores in this process, have {here}"
        )
    threads = xlasim.World(Topology(CORE_DEVICES, processes=1))
    yield threads
    threads.close()


@pytest.fixture
def short_timeout(world):
    """A 2 s collective bound for tests that provoke hangs."""
    saved = world.collective_timeout
    world.collective_timeout = 2.0
    yield 2.0
    world.collective_timeout = saved
