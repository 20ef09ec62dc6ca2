"""When the plugin wakes up, choosing the backend and turning emulation on.

The plugin is installed into an environment, so pytest loads it for every run there, XLA or
not. It stays dormant (no torch_xla import, no worker process, no header line, no Hypothesis
profile) until the session asks for XLA:

- by a setting: an `--xla-*` option, an `xla_*` ini key or an `XLASIM_*` variable. Then it
  activates in `pytest_load_initial_conftests`, before any conftest.py is imported, so a
  conftest that imports torch_xla (or even uses a device) finds the emulated slice set up.
- by collecting a test that needs it: marked `xla`, `xla_timeout`, `xla_metrics` or
  `xla_min_devices`, or using the `xla_rank`, `xla_world` or `xla_metrics` fixture. Then it
  activates at the end of
  collection; if a conftest started the XLA runtime with another device count by then, the
  error says to ask with an option instead. A slice a conftest chose itself with
  `xlasim.emulate` is the session's (nothing else asked for one).

An xdist controller runs no tests, so it does not start a world of its own (and skips the
torch_xla import that would delay every worker's start).

Multi-process topologies (`--xla-processes`, `--xla-hosts`, `--xla-topology`) put the ranks in
worker processes of the core's world; the pytest process keeps the rendezvous and the tests.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from ..errors import RuntimeAlreadyStartedError, XlasimError
from . import progress
from .hardware import tpu_attached
from .options import asked_by, resolve

if TYPE_CHECKING:
    from .executor import Executor
    from .outcomes import RankOutcome

#: The backend of an active session; absent while the plugin is dormant.
backend_key = pytest.StashKey[str]()
#: Set when the session woke the plugin up by collecting a test that needs XLA.
woken_by_key = pytest.StashKey[str]()
executor_key = pytest.StashKey["Executor"]()
#: Markers and fixtures that make a test need XLA.
MARKERS = ("xla", "xla_timeout", "xla_metrics", "xla_min_devices")
FIXTURES = ("xla_rank", "xla_world", "xla_metrics")


def choose_backend(asked: str) -> str:
    """`auto` is native on a real accelerator (PJRT_DEVICE other than CPU, or a TPU attached)."""
    if asked != "auto":
        return asked
    platform = os.environ.get("PJRT_DEVICE", "")
    if platform:
        return "emulated" if platform.upper().startswith("CPU") else "native"
    return "native" if tpu_attached() else "emulated"


def is_xdist_controller(config: pytest.Config) -> bool:
    workers = getattr(config.known_args_namespace, "numprocesses", None)
    return bool(workers) and "PYTEST_XDIST_WORKER" not in os.environ


def is_active(config: pytest.Config) -> bool:
    """Whether the session asked for XLA (the plugin's hooks do nothing otherwise)."""
    return backend_key in config.stash


def needs_xla(item: pytest.Item) -> bool:
    """Whether a collected test needs XLA: one of the plugin's markers or fixtures."""
    return any(item.get_closest_marker(name) for name in MARKERS) or any(
        name in FIXTURES for name in getattr(item, "fixturenames", ())
    )


def activate(config: pytest.Config) -> None:
    """Choose the backend and, when it is emulated, set the slice up (once per session)."""
    if is_active(config):
        return
    settings = resolve(config)
    backend = choose_backend(settings.backend)
    if backend == "native" and settings.topology_on_command_line:
        raise pytest.UsageError(
            "xlasim: --xla-processes, --xla-hosts and --xla-topology shape the emulated slice; "
            "the native backend runs the slice it finds (xmp.spawn's own processes)"
        )
    if backend == "emulated" and not is_xdist_controller(config):
        from .. import activation as core

        woken_by = config.stash.get(woken_by_key, None)
        if woken_by is None or not core.is_emulated():  # else: the conftest's own slice
            wanted = settings.slice()
            progress.say(config, f"xlasim: setting up {settings.describe_slice()} ...")
            try:
                if settings.topology:
                    core.emulate(topology=settings.topology)
                else:
                    core.emulate(
                        devices=wanted.devices, processes=wanted.processes, hosts=wanted.hosts
                    )
            except RuntimeAlreadyStartedError as error:
                if woken_by is None:
                    raise pytest.UsageError(f"xlasim: {error}") from None
                raise pytest.UsageError(
                    f"xlasim: {error}\n{woken_by} needs XLA, but no --xla-* option, xla_* ini key "
                    "or XLASIM_* variable asked for it, so xlasim woke up only at the end of "
                    "collection, after conftest.py files had started the XLA runtime: pass "
                    "--xla-devices=N (or set xla_devices in the ini file, or XLASIM_DEVICES) so "
                    "that the slice is set up before any conftest.py is imported"
                ) from None
            except XlasimError as error:
                raise pytest.UsageError(f"xlasim: {error}") from None
    if not is_xdist_controller(config):
        from .spmd import refuse_here

        refuse_here(backend)  # this process runs every test: SPMD here would outlive the test
    config.stash[backend_key] = backend


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    if asked_by(early_config) is not None:
        activate(early_config)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Wake up for the first collected test that needs XLA (when no setting asked before)."""
    config = session.config
    if is_active(config) or config.option.collectonly:
        return
    test = next((item for item in session.items if needs_xla(item)), None)
    if test is None:
        return
    config.stash[woken_by_key] = test.nodeid
    activate(config)
    start(session)


@pytest.hookimpl(wrapper=True)  # after pytest's header: the start counts in the session's time
def pytest_sessionstart(session: pytest.Session) -> Generator[None, None, None]:
    yield
    if is_active(session.config):
        start(session)


def start(session: pytest.Session) -> None:
    """Start the ranks (threads, worker processes or xmp.spawn's workers) before the first
    test, not inside it; a session that only collects starts none. Worker processes take
    seconds to start: a line says so before, and how long it took after."""
    config = session.config
    if is_xdist_controller(config) or config.option.collectonly:
        return
    began = time.monotonic()
    progress.say(config, "xlasim: starting the ranks ...")
    executor(config).start()
    progress.say(config, f"xlasim: ranks ready in {time.monotonic() - began:.1f} s")


def topology_description(config: pytest.Config) -> tuple[int, str]:
    """The slice of an active emulated session: its core count and its description."""
    settings = resolve(config)
    if is_xdist_controller(config):  # workers emulate; the controller starts no world
        return settings.slice().devices, settings.describe_slice() + " per xdist worker"
    from .. import activation as core

    described = core.topology().describe()
    return core.topology().devices, (
        f"{settings.topology}: {described}" if settings.topology else described
    )


def executor(config: pytest.Config) -> Executor:
    """The session's executor, made on first use (the native one starts worker processes).

    A test that reaches the ranks without having been seen to need them at collection (a
    fixture asked for with `request.getfixturevalue`) wakes the plugin up here."""
    if not is_active(config):
        config.stash[woken_by_key] = "a test"
        activate(config)
    if executor_key not in config.stash:
        if config.stash[backend_key] == "emulated":
            from .emulated import EmulatedExecutor

            config.stash[executor_key] = EmulatedExecutor()
            config.add_cleanup(config.stash[executor_key].close)
        else:
            from .native import NativeExecutor

            config.stash[executor_key] = NativeExecutor(resolve(config))
            config.add_cleanup(config.stash[executor_key].close)
    return config.stash[executor_key]


def run_ranks(
    config: pytest.Config,
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    *,
    size: int,
    timeout: float,
    item: pytest.Item | None = None,
) -> list[RankOutcome]:
    """Run on the session's executor. Ranks' output is shown live under `pytest -s`; otherwise
    the output of ranks that did not fail is handed to pytest's capture, tagged by rank.
    `item` is the running test: ranks in other processes render their failures as it would."""
    from .outcomes import replay_output
    from .remote import FailureStyle

    live = config.getoption("capture") == "no"
    outcomes = executor(config).run_ranks(
        fn, args, kwargs, size=size, timeout=timeout, tee=live, style=FailureStyle.of(item)
    )
    if not live:
        replay_output(outcomes)
    return outcomes
