"""Ranks in worker processes: one process per group of cores, hosts with their own filesystems.

TPU v4+ runs one process per chip and v2/v3 hosts run 4 processes x 2 cores; bugs that rely on
shared Python globals, a shared CPU RNG or one filesystem stay invisible when every rank is a
thread of one process. Here each worker process holds `cores_per_process` rank threads on its own
XLA CPU devices, and the rendezvous stays where it is: the `Run` objects live in the parent, and
worker ranks call them through a `multiprocessing.managers` server (a stdlib transport, on a Unix
socket: no ports), so mismatch, deadlock, timeout and failure semantics are exactly the threaded
ones. Each emulated host gets its own temporary directory as working directory.
"""

from __future__ import annotations

import itertools
import os
import pickle
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable
from multiprocessing import get_context
from multiprocessing.connection import Connection
from multiprocessing.managers import BaseManager
from typing import Any

from .errors import WorldAbortedError, XlasimError
from .run import Call, Run, RunObjects
from .topology import Topology

STARTUP_TIMEOUT_S = 180.0
REPLY_TIMEOUT_S = 10.0
HOST_ROOT_ENV = "XLASIM_HOST_ROOT"


class _Registry:
    """The parent-side endpoint of worker ranks: forwards each call to the Run of its job."""

    def __init__(self) -> None:
        self._runs: dict[int, Run] = {}
        self._lock = threading.Lock()

    def open(self, job: int, run: Run) -> None:
        with self._lock:
            self._runs[job] = run

    def close(self, job: int) -> None:
        with self._lock:
            self._runs.pop(job, None)

    def _run(self, job: int) -> Run:
        with self._lock:
            run = self._runs.get(job)
        if run is None:
            raise WorldAbortedError(XlasimError(f"job {job} is over"))
        return run

    def gather(
        self,
        job: int,
        rank: int,
        participants: tuple[int, ...],
        call: Call,
        payload: Any,
        combine: Callable | None,
    ) -> Any:
        return self._run(job).gather(rank, participants, call, payload, combine)

    def send(self, job: int, rank: int, channel: Any, call: Call, payload: Any) -> None:
        self._run(job).send(rank, channel, call, payload)

    def receive(self, job: int, rank: int, channel: Any, call: Call) -> tuple[Call, Any]:
        return self._run(job).receive(rank, channel, call)

    def finish(
        self, job: int, rank: int, result: Any, error: BaseException | None, traceback_text: str
    ) -> None:
        self._run(job).finish(rank, result, error, traceback_text)


_REGISTRY = _Registry()


class _Manager(BaseManager):
    pass


_Manager.register("registry", callable=lambda: _REGISTRY)


class RunClient(RunObjects):
    """A worker rank's handle on its job: rendezvous calls go to the parent; `shared` objects are
    per process, since on a real slice processes share nothing but collectives."""

    def __init__(self, job: int, size: int, topology: Topology, registry: Any, store_port: int):
        super().__init__()
        self.job = job
        self.size = size
        self.topology = topology
        self._registry = registry
        self._store_port = store_port

    def gather(self, rank, participants, call, payload, combine=None):
        return self._registry.gather(
            self.job, rank, tuple(participants), call, _owned(payload), combine
        )

    def send(self, rank, channel, call, payload):
        self._registry.send(self.job, rank, channel, call, _owned(payload))

    def receive(self, rank, channel, call):
        return self._registry.receive(self.job, rank, channel, call)

    def finish(
        self,
        rank: int,
        result: Any = None,
        error: BaseException | None = None,
        traceback_text: str = "",
    ) -> None:
        if error is None and not _picklable(result):
            error = XlasimError(
                f"rank {rank} returned an object that cannot be pickled to the "
                f"parent process: {type(result).__name__}"
            )
            result = None
        if error is not None and not _picklable(error):
            error = XlasimError(f"{type(error).__name__}: {error}")
        self._registry.finish(self.job, rank, result, error, traceback_text)

    def store(self):
        import torch.distributed as dist

        def connect():
            client = dist.TCPStore("127.0.0.1", self._store_port, is_master=False)
            return dist.PrefixStore(f"job{self.job}", client)

        return self.shared("dist-store", connect)


def _owned(payload: Any) -> Any:
    """Payloads hold views of this process's device buffers: send copies of them instead."""
    import torch

    if isinstance(payload, torch.Tensor):
        return payload.clone()
    if isinstance(payload, list):
        return [_owned(item) for item in payload]
    return payload


def _picklable(value: Any) -> bool:
    try:
        pickle.dumps(value)
    except Exception:
        return False
    return True


def _worker_main(
    process: int,
    topology: Topology,
    address: Any,
    authkey: bytes,
    control: Connection,
    host_root: str,
    store_port: int,
) -> None:
    """Entry point of a worker process: start its rank threads, then serve the parent's requests."""
    os.environ["PJRT_DEVICE"] = "CPU"
    os.environ["CPU_NUM_DEVICES"] = str(topology.cores_per_process)
    os.environ[HOST_ROOT_ENV] = host_root
    os.chdir(host_root)
    from . import activation, fresh, patches
    from .threads import RankThread

    activation.enter_worker(topology, topology.host_of(process * topology.cores_per_process))
    patches.install()
    manager = _Manager(address=address, authkey=authkey)
    manager.connect()
    registry = manager.registry()
    first = process * topology.cores_per_process
    ranks = {
        first + i: RankThread(first + i, f"xla:{i}") for i in range(topology.cores_per_process)
    }
    control.send(("ready", process))
    fresh_environment = dict(os.environ)
    while True:
        message = control.recv()
        if message[0] == "job":
            _, job, size, payload = message
            fresh.restore_environment(fresh_environment)
            fresh.reseed_cpu_generators()
            jobs = _load_jobs(payload)
            client = RunClient(job, size, topology, registry, store_port)
            for rank, (fn, args, kwargs) in jobs.items():
                ranks[rank].submit(client, fn, args, kwargs)
        elif message[0] == "where":
            control.send(("where", {r: (t.location(), t.stack()) for r, t in ranks.items()}))
        elif message[0] == "stop":
            return


def _job_payload(paths: list[str], jobs: dict) -> bytes:
    try:
        return pickle.dumps((paths, pickle.dumps(jobs)))
    except Exception as error:
        raise XlasimError(
            "the function and its arguments must be picklable to run in worker processes "
            f"(as with xmp.spawn on a TPU VM): {error}"
        ) from error


def _load_jobs(payload: bytes) -> dict[int, tuple[Callable[..., Any], tuple, dict]]:
    """Per-rank jobs, unpickled after adopting the parent's import path (test modules live there)."""
    paths, jobs = pickle.loads(payload)
    for path in reversed(paths):
        if path not in sys.path:
            sys.path.insert(0, path)
    return pickle.loads(jobs)


class _Process:
    """One worker process and the pipe that controls it."""

    def __init__(
        self,
        index: int,
        topology: Topology,
        address: Any,
        authkey: bytes,
        host_root: str,
        store_port: int,
    ):
        self.index = index
        self.ranks = range(
            index * topology.cores_per_process, (index + 1) * topology.cores_per_process
        )
        self.control, child = get_context("spawn").Pipe()
        self.process = get_context("spawn").Process(
            target=_worker_main,
            name=f"xlasim-process-{index}",
            daemon=True,
            args=(index, topology, address, authkey, child, host_root, store_port),
        )
        self.process.start()
        child.close()
        self.lock = threading.Lock()
        self.ready = False

    def wait_ready(self) -> None:
        """Block until the worker has started its ranks (at once if it already has)."""
        if self.ready:
            return
        if not self.control.poll(STARTUP_TIMEOUT_S):
            raise XlasimError(
                f"worker process {self.index} did not start within {STARTUP_TIMEOUT_S:g} s"
            )
        try:
            self.control.recv()
        except EOFError:
            raise XlasimError(
                f"worker process {self.index} died while starting (exit code {self.process.exitcode})"
            ) from None
        self.ready = True

    def where(self) -> dict[int, tuple[str, str]]:
        with self.lock:
            if not self.process.is_alive():
                return {}
            self.control.send(("where",))
            if not self.control.poll(REPLY_TIMEOUT_S):
                return {}
            return self.control.recv()[1]

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.terminate()
        self.process.join(5)


class ProcessRanks:
    """Every rank of a multi-process topology, in warm worker processes."""

    def __init__(self, topology: Topology):
        import torch.distributed as dist

        self.topology = topology
        authkey = os.urandom(32)
        manager = _Manager(address=None, authkey=authkey)
        self._server = manager.get_server()
        threading.Thread(
            target=self._server.serve_forever, name="xlasim-rendezvous", daemon=True
        ).start()
        self._store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        self._host_roots = [
            tempfile.mkdtemp(prefix=f"xlasim-host{h}-") for h in range(topology.hosts)
        ]
        self._start = lambda p: _Process(
            p,
            topology,
            self._server.address,
            authkey,
            self._host_roots[p // topology.processes_per_host],
            self._store.port,
        )
        self._processes = [self._start(p) for p in range(topology.processes)]
        for process in self._processes:
            process.wait_ready()
        self._jobs = itertools.count()
        self._job: int | None = None

    @property
    def host_roots(self) -> list[str]:
        """Each emulated host's filesystem root (its worker processes' working directory)."""
        return list(self._host_roots)

    def dispatch(self, run: Run, jobs: list[tuple[Callable[..., Any], tuple, dict]]) -> None:
        job = next(self._jobs)
        self._job = job
        _REGISTRY.open(job, run)
        paths = list(sys.path)
        payloads = {}
        for process in self._processes:
            mine = {r: jobs[r] for r in process.ranks if r < len(jobs)}
            if mine:
                payloads[process.index] = _job_payload(paths, mine)
        for index, payload in payloads.items():
            process = self._processes[index]
            process.wait_ready()
            with process.lock:
                process.control.send(("job", job, len(jobs), payload))

    def check(self, run: Run) -> None:
        """Abort the run when a worker process died under its ranks."""
        for process in self._processes:
            if not process.process.is_alive():
                run.abort(
                    XlasimError(
                        f"worker process {process.index} (ranks {list(process.ranks)}) died with exit "
                        f"code {process.process.exitcode}"
                    )
                )

    def location(self, rank: int) -> str:
        return self._where(rank)[0]

    def stack(self, rank: int) -> str:
        return self._where(rank)[1]

    def _where(self, rank: int) -> tuple[str, str]:
        process = self._processes[self.topology.process_of(rank)]
        return process.where().get(rank, ("<process not answering>", "    (no stack)\n"))

    def finished(self, run: Run) -> None:
        if self._job is not None:
            _REGISTRY.close(self._job)

    def recover(self, stuck: list[int]) -> None:
        """Processes with ranks still busy after an abort are replaced by fresh ones, which
        start in the background: the next dispatch waits for them."""
        for index in sorted({self.topology.process_of(r) for r in stuck}):
            self._processes[index].stop()
            self._processes[index] = self._start(index)

    def close(self) -> list[int]:
        """Stop every worker process (terminated if it does not stop by itself)."""
        for process in self._processes:
            with process.lock:
                if process.process.is_alive():
                    process.control.send(("stop",))
            process.process.join(5)
            process.stop()
        for root in self._host_roots:
            shutil.rmtree(root, ignore_errors=True)
        return []
