"""The session's SPMD worker processes, pytest's side, and what runs in them (library side of
`spmd`; the worker process itself is `spmd_worker.py`).

An SPMD test runs in a worker process of its own (`spmd_worker`) with SPMD on over the slice's
devices: `xr.use_spmd()` is process-wide and cannot be undone. `SpmdWorkers` starts one per
device count when first needed and replaces a dead or stopped one; `call_spmd_test` is what a
worker calls, with the `xla_mesh` placeholder swapped for the mesh. Everywhere else in the
session `xr.use_spmd()` fails, naming the marker (`session.py`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import pickle
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ...base.errors import XlasimError
from ...events import flushing
from ...reports.rank_outcome import Collect, RankOutcome
from ..options.timeouts import timeout_for
from ..remote import jobs as remote
from ..remote import rank_side
from ..session import backend_key, executor

if TYPE_CHECKING:
    from ...base.topology import Topology

#: The environment variable that makes a child pytest session an SPMD world (JSON).
SESSION_ENV = "XLASIM_SPMD_SESSION"
#: How long a fresh SPMD worker may take to import, start its runtime and turn SPMD on.
STARTUP_TIMEOUT_S = 180.0
#: The axis of `xla_mesh`.
MESH_AXIS = "data"

workers_key = pytest.StashKey["SpmdWorkers"]()


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


def _hypothesis_profile() -> tuple[str, Any] | None:
    """The session's Hypothesis profile (name, settings) for the SPMD worker, or None when the
    session has not imported Hypothesis. A database that cannot be pickled stays here (the
    worker then keeps no examples); every other setting goes."""
    if "hypothesis" not in sys.modules:
        return None
    from hypothesis import settings

    chosen = settings.default
    try:
        pickle.dumps(chosen)
    except Exception:
        chosen = settings(chosen, database=None)
    return settings.get_current_profile_name(), chosen


class _WorkerProcess:
    """One SPMD worker process and the pipe it is driven through."""

    def __init__(self, devices: int, topology: Topology | None):
        from ...ranks.processes import _main_left_alone, zygote
        from .worker import SpmdSpec, main

        context = zygote()
        spec = SpmdSpec(
            devices, topology, dict(os.environ), list(sys.path), os.getcwd(), _hypothesis_profile()
        )
        self.devices = devices
        self.control, child = context.Pipe()
        #: For writing out the events the worker recorded, even while its test hangs.
        self.flush_control, flush_child = context.Pipe()
        self.process = context.Process(
            target=main,
            name=f"xlasim-spmd-{devices}",
            daemon=True,
            args=(spec, child, flush_child),
        )
        with _main_left_alone():
            self.process.start()
        child.close()
        flush_child.close()
        self._wait_ready()

    def _receive(self, seconds: float, doing: str) -> Any:
        if not self.control.poll(seconds):
            flushing.request([self.flush_control])  # what the test recorded, before the kill
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

    def run(
        self, job: remote.RemoteJob, collect: Collect, timeout: float, name: str, trace: Path | None
    ) -> RankOutcome:
        from ...ranks import rank_coverage

        coverage = rank_coverage.requested(), os.getcwd()  # the worker measures as this does
        self.control.send(("job", job, collect, trace, coverage))
        return self._receive(timeout, f"running {name}")

    @property
    def alive(self) -> bool:
        return self.process.is_alive()

    def stop(self, wait: float = 0.0) -> None:
        """Kill the worker; with `wait`, first tell it to stop and give it that long (it
        writes its coverage data as it stops)."""
        if wait and self.process.is_alive():
            with contextlib.suppress(OSError):
                self.control.send(("stop",))
            self.process.join(wait)
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.control.close()
        self.flush_control.close()


class SpmdWorkers:
    """The session's SPMD workers, one per device count, started when first needed."""

    def __init__(self, topology: Topology | None):
        self._topology = topology
        self._workers: dict[int, _WorkerProcess] = {}

    def _identity_of(self, devices: int) -> Topology | None:
        """The slice an SPMD world of `devices` stands for: the session's, or a one-host
        slice of the same generation for a smaller world."""
        from ...base.topology import Topology

        if self._topology is None or devices == self._topology.devices:
            return self._topology
        return Topology(devices, devices, 1, self._topology.generation)

    def run(
        self,
        item: pytest.Item,
        fn: Callable[..., Any] | FunctionReference,
        kwargs: dict[str, Any],
        devices: int,
        trace: Path | None = None,
    ) -> RankOutcome:
        """Run `fn(**kwargs)` for `item` in the SPMD world of `devices`, recording into
        `trace` when given; a dead or stopped worker is replaced before the next test.

        Args:
            item: the SPMD test: its failure style, `-s`, timeout and node id.
            fn: the test function, or a `FunctionReference` the worker imports it by
                (a Hypothesis `@given` test, whose wrapper does not pickle).
            kwargs: its fixture values as the parent resolved them, `xla_mesh` a placeholder.
            devices: how many devices the SPMD world has; one worker per count.
            trace: the directory the worker records into; None records nothing.
        """
        worker = self._workers.get(devices)
        if worker is None or not worker.alive:
            worker = self._workers[devices] = _WorkerProcess(devices, self._identity_of(devices))
        style = remote.FailureStyle.of(item)
        job = remote.pack(
            call_spmd_test,
            (fn, kwargs),
            {},
            where="SPMD tests run in a worker process of their own (xr.use_spmd() is for good)",
            style=style,
        )
        live = item.config.getoption("capture") == "no"
        render = functools.partial(rank_side.render_failure, style)
        collect = Collect(output=True, tee=live, render=render)
        return worker.run(job, collect, timeout_for(item), item.nodeid, trace)

    def close(self, wait: float = 0.0) -> None:
        """Stop every worker (`wait`: as `_WorkerProcess.stop`); the next SPMD test starts a new one."""
        for worker in self._workers.values():
            worker.stop(wait)
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
        rank_side.import_modules([self.module])
        return getattr(sys.modules[self.module[0]], self.name)


def call_spmd_test(fn: Callable[..., Any] | FunctionReference, kwargs: dict[str, Any]) -> None:
    """What the SPMD worker runs: the test function, with `xla_mesh` built there.

    Args:
        fn: the test function, or a `FunctionReference` imported here to find it.
        kwargs: its fixture values; a `MeshPlaceholder` among them becomes a 1-D mesh over
            every device of the worker.
    """
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
        from ... import activation

        topology = activation.topology()
        return topology.devices, topology
    return executor(config).size, None


def workers(config: pytest.Config) -> SpmdWorkers:
    if workers_key not in config.stash:
        config.stash[workers_key] = SpmdWorkers(spmd_world_of(config)[1])
        config.add_cleanup(config.stash[workers_key].close)
    return config.stash[workers_key]
