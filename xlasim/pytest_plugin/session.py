"""The plugin's session state as a library: whether it is active, its backend, its executor.

Hook modules read the session through here (`is_active`, `executor`, `run_ranks`); the hooks
that wake the plugin up and the backend's choice are in `backends/choice`. `activate` asks the
`pytest_xlasim_choose_backend` hook (`hookspecs`) which backend runs the session, then sets
an emulated slice up; `executor` makes the session's executor on first use.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..base.emulated_slice import is_emulated
from ..base.environment import variable_set
from ..base.errors import RuntimeAlreadyStartedError, XlasimError
from ..events.recorder import TRACE_ENV
from ..races import interleavings
from ..races.launch_requests import SCHEDULE_ENV
from ..trace_files.session import PLOT_FILE, TraceFiles
from .options.settings import BACKENDS, resolve
from .reporting import progress

if TYPE_CHECKING:
    from ..base.topology import Topology
    from ..races.explore import Coverage
    from .backends.protocol import Executor
    from .reporting.outcomes import RankOutcome

#: The backend of an active session; absent while the plugin is dormant.
backend_key = pytest.StashKey[str]()
#: Set when the session woke the plugin up by collecting a test that needs XLA.
woken_by_key = pytest.StashKey[str]()
executor_key = pytest.StashKey["Executor"]()
#: Markers and fixtures that make a test need XLA.
MARKERS = ("xla", "xla_timeout", "xla_metrics", "xla_min_devices")
FIXTURES = ("xla_rank", "xla_world", "xla_metrics")


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


def choose(config: pytest.Config, asked: str) -> str:
    """The backend of the session, as the `pytest_xlasim_choose_backend` hook decides it.

    Args:
        config: the session's config, whose hook is called.
        asked: what the settings ask for: "auto", "emulated" or "native".
    """
    backend = config.hook.pytest_xlasim_choose_backend(config=config, asked=asked)
    if backend not in BACKENDS[1:]:
        raise pytest.UsageError(
            f"xlasim: pytest_xlasim_choose_backend returned {backend!r}; a backend is one of "
            f"{', '.join(BACKENDS[1:])}"
        )
    return backend


def activate(config: pytest.Config) -> None:
    """Choose the backend and, when it is emulated, set the slice up (once per session)."""
    if is_active(config):
        return
    settings = resolve(config)
    backend = choose(config, settings.backend)
    if backend == "native" and settings.topology_on_command_line:
        raise pytest.UsageError(
            "xlasim: --xla-processes, --xla-hosts and --xla-topology shape the emulated slice; "
            "the native backend runs the slice it finds (xmp.spawn's own processes)"
        )
    if settings.pod is not None:
        _refuse_pod_here(config, backend)
        settings.pod.export()
    if backend == "emulated" and not is_xdist_controller(config):
        from .. import activation as core

        woken_by = config.stash.get(woken_by_key, None)
        if woken_by is None or not is_emulated():  # else: the conftest's own slice
            wanted = settings.slice()
            progress.say(config, f"xlasim: setting up {settings.describe_slice()} ...")
            try:
                if settings.topology:
                    core.emulate(topology=settings.topology, arithmetic=settings.arithmetic)
                else:
                    core.emulate(
                        devices=wanted.devices,
                        processes=wanted.processes,
                        hosts=wanted.hosts,
                        arithmetic=settings.arithmetic,
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
        if settings.pod is not None:
            _enter_pod(core.topology())
    if not is_xdist_controller(config):
        _refuse_spmd_here(backend)  # this process runs every test: SPMD here would outlive it
    config.stash[backend_key] = backend


def _refuse_pod_here(config: pytest.Config, backend: str) -> None:
    """A pod spreads an emulated slice over machines whose pytest processes run the same tests
    in step: natively the TPU pod's own runtime joins the hosts, and xdist's workers would each
    be a machine of their own."""
    if backend != "emulated":
        raise pytest.UsageError(
            "xlasim: --xla-machines spreads an emulated slice over machines; the native "
            "backend runs on the TPU pod's own hosts (drop --xla-machines there)"
        )
    if getattr(config.known_args_namespace, "numprocesses", None):
        raise pytest.UsageError(
            "xlasim: --xla-machines and xdist (-n) do not mix: every machine of a pod runs the "
            "same tests in one pytest process"
        )


def _enter_pod(topology: Topology) -> None:
    """On a machine of a pod: the slice checked against the machines, this process answering
    as the machine's first host (`machines.settings.enter`)."""
    from ..pods import membership as pod

    try:
        pod.enter(topology)
    except XlasimError as error:
        raise pytest.UsageError(f"xlasim: {type(error).__name__}: {error}") from None


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
            from .backends.emulated import EmulatedExecutor

            config.stash[executor_key] = EmulatedExecutor()
            config.add_cleanup(config.stash[executor_key].close)
        else:
            from .backends.native import NativeExecutor

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
    `item` is the running test: ranks in other processes render their failures as it would.

    Args:
        config: the session's config (its executor, `-s`, `--pdb`, trace and schedule options).
        fn: what every rank calls.
        args: positional arguments, the same for every rank.
        kwargs: keyword arguments, the same for every rank.
        size: how many ranks take part.
        timeout: seconds the run may take before it fails as hung.
        item: the running test; None when none runs (a session-scoped fixture's call),
            and the trace and schedule files are named "session".
    """
    from .per_rank.rank_debugging import on_ranks
    from .remote.jobs import FailureStyle
    from .reporting.outcomes import replay_output

    live = config.getoption("capture") == "no"
    fn = on_ranks(config, item, fn)  # under --pdb, a post-mortem in the rank that fails

    def run() -> list[RankOutcome]:
        return executor(config).run_ranks(
            fn, args, kwargs, size=size, timeout=timeout, tee=live, style=FailureStyle.of(item)
        )

    schedules = config.getoption("xla_schedules", None)
    with traced(config, item) as directory, scheduled_as(config, item):
        first = len(interleavings.taken)
        outcomes = _explored(run, schedules, item) if schedules else run()
    if item is not None and len(interleavings.taken) > first and not schedules:
        taken = interleavings.taken[first:]
        lines = [f"schedule {i.seed}: {i.comparison()}" for i in taken]
        item.add_report_section("call", "xlasim schedule", "\n".join(lines))
    if not live:
        replay_output(outcomes)
    name_trace(item, directory, outcomes)
    return outcomes


def name_trace(
    item: pytest.Item | None, directory: Path | None, outcomes: list[RankOutcome]
) -> None:
    """A failed test's report names the trace its ranks recorded, if they did.

    Args:
        item: the test whose report gets the section; None adds none.
        directory: where the ranks recorded (`traced`); None when nothing was traced.
        outcomes: each rank's outcome; the section is added only when one raised.
    """
    if directory is not None and item is not None and any(o.raised for o in outcomes):
        plot = directory / PLOT_FILE
        files = TraceFiles(directory, plot if plot.exists() else None)
        item.add_report_section("call", "xlasim trace", files.describe())


@contextmanager
def traced(config: pytest.Config, item: pytest.Item | None) -> Iterator[Path | None]:
    """With `--xla-trace=DIR`, the ranks record into a directory of the test's own, named by
    its id (`XLASIM_TRACE` set while they run; docs/tracing.md).

    Args:
        config: the session's config, read for `--xla-trace`.
        item: the running test, whose node id names the directory; None names it "session".
    """
    root = config.getoption("xla_trace", None)
    if not root:
        yield None
        return
    name = re.sub(r"[^\w.=-]+", "_", item.nodeid if item is not None else "session").strip("_")
    directory = Path(root).absolute() / name
    with variable_set(TRACE_ENV, str(directory)):
        yield directory


@contextmanager
def scheduled_as(config: pytest.Config, item: pytest.Item | None) -> Iterator[None]:
    """Under `--xla-schedules`/`--xla-schedule`, the ranks' interleavings are written under the
    test's id (each run of the test starts its files anew: a replay compares with them).

    Args:
        config: the session's config, read for `--xla-schedules`.
        item: the running test, whose node id names the files; None names them "session".
    """
    if config.getoption("xla_schedules", None) is None and os.environ.get(SCHEDULE_ENV) is None:
        yield
        return
    from ..races.launch_requests import named

    with named(item.nodeid if item is not None else "session"):
        yield


def _explored(
    run: Callable[[], list[RankOutcome]], schedules: int, item: pytest.Item | None
) -> list[RankOutcome]:
    """The ranks under `--xla-schedules=N`: the first schedule that fails is named in the
    report (the ranks' own renderings were made before it was known)."""
    from ..races.explore import Coverage, explore, replay_note

    def replay(seed: int) -> str:
        return f"--xla-schedule={seed}"

    first = len(interleavings.taken)
    outcomes, failed, coverage = explore(run, schedules, replay)
    explored.setdefault(item.nodeid if item is not None else "", Coverage()).add(coverage)
    if item is not None:
        lines = [coverage.describe()]
        if failed is not None:
            lines.append(replay_note(failed, replay(failed)))
            lines += [i.comparison() for i in interleavings.taken[first:] if i.seed == failed]
        item.add_report_section("call", "xlasim schedules", "\n".join(lines))
    return list(outcomes)


#: What each test's exploration covered in this process, by test (its Hypothesis examples and
#: `xla_world.run` calls together); the session's summary adds them up.
explored: dict[str, Coverage] = {}


def _refuse_spmd_here(backend: str) -> None:
    """This pytest process runs every test of the session: `xr.use_spmd()` here would stay on.

    Emulated, the guard is among the emulation's patches; natively only the guard is put on."""
    from ..emulation import spmd

    spmd.refuse_outside_ranks(
        "this pytest process runs every test of the session, and SPMD cannot be turned off, so "
        f"every later test would run in SPMD mode. Mark the test {spmd.MARKER}: its body then "
        "runs once, in a process of its own with SPMD on over the slice's devices (the "
        "xla_mesh fixture is a 1-D mesh over them)."
    )
    if backend != "emulated":
        spmd.guard()
