"""`@pytest.mark.xla(spmd=True)`: the test body runs once, in an SPMD world over the slice.

`xr.use_spmd()` is process-wide and cannot be undone, so an SPMD test cannot run in the pytest
process (later tests would run in SPMD mode; on the threads mode the ranks are this process)
nor on a rank. It runs in the session's SPMD worker (`spmd_worker`): a process of its own,
started on the first SPMD test and kept warm for the next, with SPMD on and every device of the
slice visible, identity included. One worker per device count (`devices=N` gives a world of N);
a test that crashes the worker or outlives its timeout gets a failure naming that, and the next
SPMD test gets a fresh worker. Everywhere else in an emulated session `xr.use_spmd()` fails with
an error naming the marker (`xlasim.spmd`).

The `xla_mesh` fixture is the 1-D mesh over the SPMD world's devices (`xs.get_1d_mesh("data")`),
built in the worker. Fixture values are resolved in the parent and pickled to the worker, as for
per-rank tests in worker processes; a mesh can only be built where SPMD is on, so `xla_mesh` is
a placeholder the worker swaps for the mesh.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from ..errors import XlasimError
from ..outcome import Collect, RankOutcome
from . import remote, remote_rank
from .backend_choice import backend_key, executor
from .outcomes import settle
from .timeouts import timeout_for

if TYPE_CHECKING:
    from ..topology import Topology

#: How long a fresh SPMD worker may take to import, start its runtime and turn SPMD on.
STARTUP_TIMEOUT_S = 180.0
#: The axis of `xla_mesh`.
MESH_AXIS = "data"

_rendering_key = pytest.StashKey[Any]()
_workers_key = pytest.StashKey["SpmdWorkers"]()


def wants_spmd(item: pytest.Item) -> bool:
    """Whether the test is marked `xla(spmd=True)`."""
    marker = item.get_closest_marker("xla")
    return marker is not None and marker.kwargs.get("spmd") is True


class SpmdWorkerError(XlasimError):
    """The SPMD worker did not start, died, or did not finish a test in time."""


def _how_it_ended(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        return f"was killed by {signal.Signals(-exitcode).name}"
    return f"exited with code {exitcode}"


class _Worker:
    """One SPMD worker process and the pipe it is driven through."""

    def __init__(self, devices: int, topology: Topology | None):
        from ..processes import _main_left_alone, zygote
        from .spmd_worker import SpmdSpec, main

        context = zygote()
        spec = SpmdSpec(devices, topology, dict(os.environ), list(sys.path), os.getcwd())
        self.devices = devices
        self.control, child = context.Pipe()
        self.process = context.Process(
            target=main, name=f"xlasim-spmd-{devices}", daemon=True, args=(spec, child)
        )
        with _main_left_alone():
            self.process.start()
        child.close()
        self._wait_ready()

    def _receive(self, seconds: float, doing: str) -> Any:
        if not self.control.poll(seconds):
            self.stop()
            raise SpmdWorkerError(
                f"the SPMD worker (pid {self.process.pid}, {self.devices} devices) did not finish "
                f"{doing} within {seconds:g} s and was stopped; the next SPMD test gets a fresh one"
            )
        try:
            return self.control.recv()
        except (EOFError, OSError):
            self.process.join(5)
            raise SpmdWorkerError(
                f"the SPMD worker (pid {self.process.pid}, {self.devices} devices) "
                f"{_how_it_ended(self.process.exitcode)} while {doing}; its output above says "
                "why. The next SPMD test gets a fresh worker."
            ) from None

    def _wait_ready(self) -> None:
        _, found = self._receive(STARTUP_TIMEOUT_S, "starting (torch_xla import, SPMD on)")
        if found != self.devices:
            self.stop()
            raise SpmdWorkerError(
                f"the SPMD worker's runtime has {found} devices, not the {self.devices} asked for"
            )

    def run(self, job: remote.Job, collect: Collect, timeout: float, name: str) -> RankOutcome:
        self.control.send(("job", job, collect))
        return self._receive(timeout, f"running {name}")

    @property
    def alive(self) -> bool:
        return self.process.is_alive()

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.control.close()


class SpmdWorkers:
    """The session's SPMD workers, one per device count, started when first needed."""

    def __init__(self, topology: Topology | None):
        self._topology = topology
        self._workers: dict[int, _Worker] = {}

    def _identity_of(self, devices: int) -> Topology | None:
        """The slice an SPMD world of `devices` stands for: the session's, or a one-host
        slice of the same generation for a smaller world."""
        from ..topology import Topology

        if self._topology is None or devices == self._topology.devices:
            return self._topology
        return Topology(devices, devices, 1, self._topology.generation)

    def run(
        self,
        item: pytest.Item,
        fn: Callable[..., Any] | FunctionReference,
        kwargs: dict[str, Any],
        devices: int,
    ) -> RankOutcome:
        """Run `fn(**kwargs)` for `item` in the SPMD world of `devices`; a dead or stopped
        worker is replaced before the next test."""
        worker = self._workers.get(devices)
        if worker is None or not worker.alive:
            worker = self._workers[devices] = _Worker(devices, self._identity_of(devices))
        style = remote.FailureStyle.of(item)
        job = remote.pack(
            call_spmd_test,
            (fn, kwargs),
            {},
            where="SPMD tests run in a worker process of their own (xr.use_spmd() is for good)",
            style=style,
        )
        live = item.config.getoption("capture") == "no"
        render = functools.partial(remote_rank.render_failure, style)
        collect = Collect(output=True, tee=live, render=render)
        return worker.run(job, collect, timeout_for(item), item.nodeid)

    def close(self) -> None:
        for worker in self._workers.values():
            worker.stop()
        self._workers.clear()


class MeshPlaceholder:
    """What `xla_mesh` is outside the SPMD worker; the worker swaps it for the mesh."""

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"xla_mesh.{name} was read outside the SPMD worker: fixtures are resolved in the "
            "pytest process, where SPMD is off, so only the body of a "
            "@pytest.mark.xla(spmd=True) test sees the mesh"
        )

    def __repr__(self) -> str:
        return "<xla_mesh: built in the SPMD worker>"


@dataclass(frozen=True)
class FunctionReference:
    """A module-level test function named by its module (name, file, asserts rewritten) and
    name: Hypothesis' `@given` wrapper is not the module's function to pickle, so the worker
    imports the module and looks the test up there."""

    module: tuple[str, str, bool]
    name: str

    @classmethod
    def of(cls, item: pytest.Function) -> FunctionReference | Callable[..., Any]:
        if item.cls is not None:  # a bound method pickles through its instance
            return item.obj
        module = item.module
        rewritten = type(getattr(module, "__loader__", None)).__name__ == "AssertionRewritingHook"
        return cls((module.__name__, str(item.path), rewritten), item.originalname)

    def load(self) -> Callable[..., Any]:
        remote_rank.import_modules([self.module])
        return getattr(sys.modules[self.module[0]], self.name)


def call_spmd_test(fn: Callable[..., Any] | FunctionReference, kwargs: dict[str, Any]) -> None:
    """What the SPMD worker runs: the test function, with `xla_mesh` built there."""
    if isinstance(fn, FunctionReference):
        fn = fn.load()
    if any(isinstance(value, MeshPlaceholder) for value in kwargs.values()):
        import torch_xla.distributed.spmd as xs

        mesh = xs.get_1d_mesh(MESH_AXIS)
        kwargs = {k: mesh if isinstance(v, MeshPlaceholder) else v for k, v in kwargs.items()}
    fn(**kwargs)


def spmd_world_of(config: pytest.Config) -> tuple[int, Topology | None]:
    """The session's SPMD world: every device of the slice, and the emulated slice whose
    identity they carry (None natively)."""
    if config.stash[backend_key] == "emulated":
        from .. import activation

        topology = activation.topology()
        return topology.devices, topology
    return executor(config).size, None


def _workers(config: pytest.Config) -> SpmdWorkers:
    if _workers_key not in config.stash:
        config.stash[_workers_key] = SpmdWorkers(spmd_world_of(config)[1])
        config.add_cleanup(config.stash[_workers_key].close)
    return config.stash[_workers_key]


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not wants_spmd(pyfuncitem):
        return None
    from .ranks import world_size

    fn = FunctionReference.of(pyfuncitem)
    kwargs = {arg: pyfuncitem.funcargs[arg] for arg in pyfuncitem._fixtureinfo.argnames}
    outcome = _workers(pyfuncitem.config).run(pyfuncitem, fn, kwargs, world_size(pyfuncitem))
    for text, stream in ((outcome.stdout, sys.stdout), (outcome.stderr, sys.stderr)):
        if text and pyfuncitem.config.getoption("capture") != "no":
            stream.write(text)
    if outcome.rendering is not None:
        pyfuncitem.stash[_rendering_key] = outcome.rendering
    settle([outcome])
    return True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failure in the SPMD worker is reported as pytest rendered it there."""
    report = yield
    rendering = item.stash.get(_rendering_key, None)
    if call.when == "call" and report.failed and rendering is not None:
        report.longrepr = rendering
    return report


def refuse_here(backend: str) -> None:
    """This pytest process runs every test of the session: `xr.use_spmd()` here would stay on.

    Emulated, the guard is among the emulation's patches; natively only the guard is put on."""
    from .. import spmd

    spmd.refuse_outside_ranks(
        "this pytest process runs every test of the session, and SPMD cannot be turned off, so "
        f"every later test would run in SPMD mode. Mark the test {spmd.MARKER}: its body then "
        "runs once, in a process of its own with SPMD on over the slice's devices (the "
        "xla_mesh fixture is a 1-D mesh over them)."
    )
    if backend != "emulated":
        spmd.guard()


def pytest_runtest_setup(item: pytest.Item) -> None:
    if "xla_mesh" in getattr(item, "fixturenames", ()) and not wants_spmd(item):
        pytest.fail(
            f"{item.nodeid} asks for xla_mesh but is not marked @pytest.mark.xla(spmd=True): a "
            "mesh needs SPMD, which only such a test's body has",
            pytrace=False,
        )


@pytest.fixture(scope="session")  # session: Hypothesis refuses function-scoped fixtures
def xla_mesh(pytestconfig: pytest.Config) -> MeshPlaceholder:
    """The 1-D mesh over the SPMD world's devices, axis "data" (`xs.get_1d_mesh("data")`),
    built afresh in the worker for each test.

    Only for `@pytest.mark.xla(spmd=True)` tests, whose body runs where SPMD is on.
    """
    executor(pytestconfig)  # wakes the plugin up if nothing else did
    return MeshPlaceholder()
