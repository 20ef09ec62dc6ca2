"""Fixtures of the emulator's own tests (tests/core, tests/conformance): they build on the
core's world directly, so they need emulation in this process (they skip on a real TPU)."""

import os
import tempfile
from collections.abc import Iterator

import pytest

import xlasim
from fixtures.ci import (  # noqa: F401 (CI's checks, fixtures/ci.py: hooks of this conftest)
    pytest_addoption,
    pytest_make_collect_report,
    pytest_sessionfinish,
)
from xlasim.base.topology import Topology

CORE_DEVICES = 8


def _why_not_here(config) -> str | None:
    """Why this session cannot run the emulator's own tests, or None when it can."""
    if os.environ.get("PJRT_DEVICE", "CPU").startswith("TPU"):
        return "xlasim's own tests need emulation, not a TPU"
    if config.pluginmanager.has_plugin("xlasim"):
        from xlasim.pytest_plugin.session import backend_key

        if config.stash.get(backend_key, "emulated") == "native":
            return "xlasim's own tests need emulation; this session runs the native backend"
    return None


def _session_slice_is_set(config) -> bool:
    """Whether a setting (--xla-devices, ...) chose the session's slice before collection."""
    if not config.pluginmanager.has_plugin("xlasim"):
        return False
    from xlasim.pytest_plugin.session import is_active

    return is_active(config)


#: Directories whose tests drive the core's world from this process.
EMULATOR_TESTS = ("tests/core/", "tests/conformance/", "tests/faults/", "tests/traces/")


#: What makes a test run on the session's slice (and adapt to its size): the plugin's markers
#: and fixtures. Such a test is `portable`: `pytest --xla-devices=4 -m portable` is the suite a
#: 4-core slice changes (see docs/testing.md).
SLICE_MARKERS = ("xla", "xla_min_devices", "xla_timeout", "xla_metrics")
SLICE_FIXTURES = ("xla_rank", "xla_world", "xla_metrics")


def pytest_configure(config):
    # Launches under a schedule write their interleavings (docs/races.md): the suite's go to a
    # directory of the session's, not into the checkout.
    if not os.environ.get("XLASIM_SCHEDULE_DIR"):
        os.environ["XLASIM_SCHEDULE_DIR"] = tempfile.mkdtemp(prefix="xlasim-test-schedules-")
    config.addinivalue_line(
        "markers",
        "portable: runs on the session's slice (marked xla or using xla_world/xla_rank) and "
        "adapts to its size; set by tests/conftest.py, select with -m portable",
    )
    config.addinivalue_line(
        "markers",
        "same_on_every_slice: uses the session's world but not its size (a world of one), so "
        "it is not `portable`: the 8-core run checks it, the smaller slices' steps would repeat it",
    )
    config.addinivalue_line(
        "markers",
        "slow: takes long (tests/faults' slow cells, tests/pods' pods); deselected unless "
        "-m names it (`-m slow`), run by CI in steps of their own",
    )
    config.addinivalue_line(
        "markers",
        "extended: more of what CI already checks, run outside CI's 40 minutes (`tox -e "
        "extended`, docs/testing.md); deselected unless -m names it",
    )


#: Markers whose tests run only when a `-m` expression names them.
OPT_IN_MARKERS = ("slow", "extended")


def _deselect_opt_in(config, items) -> None:
    """Slow and extended tests run only when asked for (`-m slow`, `-m extended`, or any `-m`
    expression naming them)."""
    for name in OPT_IN_MARKERS:
        if name in (config.option.markexpr or ""):
            continue
        left_out = [item for item in items if item.get_closest_marker(name)]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [item for item in items if not item.get_closest_marker(name)]


@pytest.hookimpl(tryfirst=True)  # before -m portable deselects
def pytest_collection_modifyitems(config, items):
    _deselect_opt_in(config, items)
    for item in items:
        if item.get_closest_marker("same_on_every_slice"):
            continue
        if any(item.get_closest_marker(name) for name in SLICE_MARKERS) or any(
            name in item.fixturenames for name in SLICE_FIXTURES
        ):
            item.add_marker(pytest.mark.portable)
    reason = _why_not_here(config)
    skip = None if reason is None else pytest.mark.skip(reason=reason)
    sized = _session_slice_is_set(config)
    for item in items:
        if not any(part in item.path.as_posix() for part in EMULATOR_TESTS):
            continue
        if skip is not None:
            item.add_marker(skip)
        elif sized and "world" in item.fixturenames:
            # The emulator's mechanics are tested on a world of 8 rank threads of this process,
            # so a session of fewer cores (--xla-devices=4 or 1) skips these tests, saying so
            # before they run (the plugin counts them in its header).
            item.add_marker(pytest.mark.xla_min_devices(CORE_DEVICES))


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
