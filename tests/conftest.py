"""Fixtures of the emulator's own tests (tests/core, tests/conformance): they build on the
core's world directly, so they need emulation in this process (they skip on a real TPU)."""

import os

import pytest

import xlasim

CORE_DEVICES = 8


def _why_not_here(config) -> str | None:
    """Why this session cannot run the core's tests, or None when it can."""
    if os.environ.get("PJRT_DEVICE", "CPU").startswith("TPU"):
        return "xlasim's own tests need emulation, not a TPU"
    if config.pluginmanager.has_plugin("xlasim"):
        from xlasim.pytest_plugin.activation import backend_key

        if config.stash.get(backend_key, "emulated") == "native":
            return "xlasim's own tests need emulation; this session runs the native backend"
    if xlasim.is_emulated() and not xlasim.activation.topology().threaded:
        return (
            "xlasim's own tests build their own worlds next to the session's threaded one; this "
            f"session's ranks live in worker processes ({xlasim.activation.topology().describe()}), "
            "and tests/core/test_processes.py covers those topologies"
        )
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
def world() -> xlasim.World:
    """The emulated world; started here with 8 cores if the plugin did not start one."""
    if not xlasim.is_emulated():
        xlasim.emulate(devices=int(os.environ.get("XLASIM_DEVICES", CORE_DEVICES)))
    world = xlasim.world()
    if world.size < CORE_DEVICES:
        pytest.skip(f"xlasim's core tests need {CORE_DEVICES} emulated cores, have {world.size}")
    return world


@pytest.fixture
def short_timeout(world):
    """A 2 s collective bound for tests that provoke hangs."""
    saved = world.collective_timeout
    world.collective_timeout = 2.0
    yield 2.0
    world.collective_timeout = saved
