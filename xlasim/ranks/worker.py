"""The worker process of a multi-process world: its rank threads and their link to the parent.

A worker is forked from a preloaded zygote (see `processes.py`), holds `cores_per_process` rank
threads on its own XLA CPU client, and serves its parent's control messages on its main thread:
a job to run (one per launch), a request for its ranks' stacks (hang reports), stop. Each rank
thread has its own connection to the parent, over which it meets the other ranks: the
rendezvous (`Run`) lives in the parent, and payloads travel through shared memory.

Every job starts the way a fresh TPU process would: with the launching process's environment
and working directory (its host's, for other emulated hosts), fresh CPU generators, and the
launching script importable as `__main__`.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import runpy
import signal
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Client, Connection
from typing import Any

from ..base import emulated_slice
from ..base.topology import Topology
from ..emulation import patches
from ..emulation.rendezvous import Call, RunObjects
from ..events import hooks, recorder
from ..races.watch import synchronizing
from ..reports import rank_debugger, rank_output
from ..reports.debugger_desk import Request
from ..reports.rank_outcome import Collect, RankOutcome
from . import launch_reset, rank_coverage, shared_payloads
from .threads import RankThread


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker needs to start: its place in the slice and how to reach the parent."""

    process: int
    topology: Topology
    address: str
    authkey: bytes
    #: This worker's host's own directory (hosts other than the launching one), or None.
    host_root: str | None
    store_port: int
    #: What the launching process installed besides the emulation (`patches.installed_with`:
    #: torch_xla's launchers), pickled by name.
    more_patches: tuple[Callable[[], list[Any]], ...] = ()


@dataclass(frozen=True)
class JobSpec:
    """One launch, as a worker receives it."""

    job: int
    size: int
    #: Pickled `{rank: (fn, args, kwargs)}` for this worker's ranks.
    jobs: bytes
    sys_path: list[str]
    environment: dict[str, str]
    cwd: str
    #: The launching script (its functions are pickled by reference to `__main__`).
    main_path: str | None
    #: What the ranks record in their outcomes beyond result and error.
    collect: Collect
    #: The coverage.py configuration to measure with (`rank_coverage.requested`), or None.
    coverage: str | None = None


class Link:
    """A rank thread's connection to the parent's rendezvous."""

    def __init__(self, spec: WorkerSpec, rank: int):
        self.connection = Client(spec.address, family="AF_UNIX", authkey=spec.authkey)
        self.connection.send(("hello", rank, os.getpid()))
        self._arena = shared_payloads.Arena()
        self._sender = shared_payloads.Sender()
        self._receiver = shared_payloads.Receiver()

    def call(self, request: tuple, payload: Any = None, owned: bool = False) -> Any:
        """Send a request (with a payload: through this rank's arena, or a new block when the
        payload must outlive the call) and return the parent's answer.

        Args:
            request: what the rank asks of the parent's run: its name first (`"gather"`,
                `"send"`...), then the job's number and the call's arguments.
            payload: the data that goes with it (tensors through shared memory); None: none.
            owned: whether the payload must outlive the call (a message waiting in a mailbox,
                a result): then it gets a block of its own rather than the arena's.
        """
        message = None
        if payload is not None:
            message = shared_payloads.encode(payload, None if owned else self._arena)
        self._sender.send(self.connection, request, message)
        if message is not None and owned:
            message.release()
        (status, error), value = self._receiver.receive(self.connection)
        if status == "error":
            raise error
        return value


class RunClient(RunObjects):
    """A worker rank's handle on its launch: rendezvous calls go to the parent; `shared`
    objects are per process, since on a real slice processes share nothing but collectives."""

    def __init__(
        self,
        job: int,
        size: int,
        topology: Topology,
        links: dict[int, Link],
        port: int,
        collect: Collect,
    ):
        super().__init__()
        self.job = job
        self.size = size
        self.topology = topology
        self.collect = collect
        self._links = links
        self._store_port = port

    def gather(self, rank, participants, call: Call, payload, combine=None):
        """`RankRun.gather`, served by the parent's run over the rank's link.

        Args:
            rank: the calling rank, global in the launch.
            participants: the ranks of the collective's group.
            call: what the rank asked for; the participants' calls must match.
            payload: the rank's contribution (host tensors, through shared memory).
            combine: makes the result from the payloads in participant order, run in the
                parent (so it must pickle); None: the list itself.
        """
        request = ("gather", self.job, tuple(participants), call, combine)
        with synchronizing():
            return self._links[rank].call(request, payload)

    def send(self, rank, channel, call: Call, payload) -> None:
        """`RankRun.send`: the message waits in the parent's mailbox, in a block of its own.

        Args:
            rank: the sending rank.
            channel: the mailbox's key.
            call: what the sender asked for.
            payload: the message.
        """
        with synchronizing():
            self._links[rank].call(("send", self.job, channel, call), payload, owned=True)

    def receive(self, rank, channel, call: Call):
        """`RankRun.receive`, from the parent's mailbox.

        Args:
            rank: the receiving rank.
            channel: the mailbox's key.
            call: what the receiver asked for.
        """
        with synchronizing():
            return self._links[rank].call(("receive", self.job, channel, call))

    def point(self, rank: int, point: str, detail: str = "") -> None:
        """A scheduling point of `rank`: the launching process's scheduler answers when it is
        the rank's turn (`Run.point`). Nothing is asked when the launch runs no schedule.

        Args:
            rank: the rank reaching the point.
            point: what it does next, as replays compare it (`write at prog.py:12 in f`).
            detail: what else a person reads (the path); empty: nothing.
        """
        if self.collect.schedule is not None:
            self._links[rank].call(("point", self.job, point, detail))

    def debug(self, rank: int, request: Request) -> str | None:
        """A rank's debugger asks the terminal: the parent's run serves it.

        Args:
            rank: the rank whose debugger asks.
            request: a line to read, output to show, or the session's end; the reply is the
                line read, or None for a request that reads none.
        """
        return self._links[rank].call(("debug", self.job, request))

    def finish(self, outcome: RankOutcome) -> None:
        """Hand the rank's outcome to the parent's run: its result through shared memory, the
        rest pickled with the request."""
        outcome = outcome.portable()
        request = ("finish", self.job, dataclasses.replace(outcome, result=None))
        self._links[outcome.rank].call(request, outcome.result, owned=True)

    def store(self):
        import torch.distributed as dist

        def connect():
            client = dist.TCPStore("127.0.0.1", self._store_port, is_master=False)
            return dist.PrefixStore(f"job{self.job}", client)

        return self.shared("dist-store", connect)


def main(spec: WorkerSpec, control: Connection) -> None:
    """Entry point of a worker process: start its rank threads, then serve the parent.

    Args:
        spec: what the worker is: its index, the slice, how to reach the parent's links.
        control: the worker's end of its control pipe, on which jobs arrive and `where` and
            `flush` are answered; the worker returns when the parent closes it.
    """
    topology = spec.topology
    # Ctrl-C reaches every process of the terminal's group: the launching process owns it
    # (it releases the ranks, replaces stuck workers, or exits and stops them all).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Forked from the zygote, this process has the zygote's environment: the launching
    # process's when the zygote started, with its device count. This worker's runtime (started
    # by its first device use) must see its own, and so must every job.
    overrides = {"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(topology.cores_per_process)}
    os.environ.update(overrides)
    first = spec.process * topology.cores_per_process
    emulated_slice.enter_worker(topology, topology.host_of(first))
    patches.install(*spec.more_patches)
    rank_output.install()
    rank_debugger.install()  # breakpoints stop a rank at the launching process's terminal
    _share_the_cpus(topology)
    ranks = {
        first + i: RankThread(first + i, f"xla:{i}") for i in range(topology.cores_per_process)
    }
    links = {rank: Link(spec, rank) for rank in ranks}
    control.send(("ready", spec.process))
    while True:
        try:
            message = control.recv()
        except (EOFError, OSError):  # the launching process is gone: so is this worker's reason
            return
        if message[0] == "job":
            job: JobSpec = message[1]
            launch_reset.restore_environment({**job.environment, **overrides})
            hooks.follow(job.environment.get(recorder.TRACE_ENV))
            os.chdir(spec.host_root or job.cwd)
            if rank_coverage.follow(job.coverage, job.cwd):
                ranks = _renewed(ranks)  # coverage.py follows threads started after it
            launch_reset.reseed_cpu_generators()
            client = RunClient(job.job, job.size, topology, links, spec.store_port, job.collect)
            try:
                jobs = _load(job)
            except BaseException as error:  # each rank reports it, as if its function raised
                jobs = {rank: (_raise, (error,), {}) for rank in ranks if rank < job.size}
            for rank, (fn, args, kwargs) in jobs.items():
                ranks[rank].submit(client, fn, args, kwargs)
        elif message[0] == "where":
            control.send(("where", {r: (t.location(), t.stack()) for r, t in ranks.items()}))
        elif message[0] == "flush":
            tracer = recorder.current()
            if tracer is not None:
                tracer.flush()
            rank_coverage.save()
            control.send(("flush", None))
        elif message[0] == "stop":
            rank_coverage.save()  # as it stops, whatever way its process then ends
            return


def _renewed(ranks: dict[int, RankThread]) -> dict[int, RankThread]:
    """The same ranks on fresh threads (the old ones, idle between jobs, exit)."""
    for thread in ranks.values():
        thread.retire()
    return {rank: RankThread(rank, thread.device) for rank, thread in ranks.items()}


def _share_the_cpus(topology: Topology) -> None:
    """Give this worker's CPU ops (torch's intra-op pool) its share of the machine's cores.

    A TPU VM's process has many host cores; here every worker shares this machine's, and
    OpenMP pools that each claim all of them spin against each other between ops (measured:
    several times the CPU per collective with 8 workers on 2 cores)."""
    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // topology.processes))


def _raise(error: BaseException) -> None:
    raise error


def _load(job: JobSpec) -> dict[int, tuple[Callable[..., Any], tuple, dict]]:
    """Per-rank jobs, unpickled after adopting the parent's import path (test modules live
    there) and, when they refer to it, its `__main__` script."""
    for path in reversed(job.sys_path):
        if path not in sys.path:
            sys.path.insert(0, path)
    if job.main_path is not None:
        _import_main(job.main_path)
    return pickle.loads(job.jobs)


def _import_main(path: str) -> None:
    """Run the launching script as `__mp_main__` (its `if __name__ == "__main__":` block does
    not run), standing in for `__main__`, as multiprocessing's spawn does."""
    current = sys.modules.get("__mp_main__")
    if current is not None and getattr(current, "__file__", None) == path:
        return
    module = types.ModuleType("__mp_main__")
    module.__dict__.update(runpy.run_path(path, run_name="__mp_main__"))
    sys.modules["__mp_main__"] = sys.modules["__main__"] = module
