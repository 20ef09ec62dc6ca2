"""Ranks in worker processes: the launching process's side of a multi-process world.

TPU v4+ runs one process per chip and v2/v3 hosts run 4 processes x 2 cores; bugs that rely on
shared Python globals, a shared CPU RNG or one filesystem stay invisible when every rank is a
thread of one process. Here each worker process (`worker.py`) holds `cores_per_process` rank
threads on its own XLA CPU client, and the rendezvous stays where it is: the `Run` of each
launch lives in this process, and every worker rank reaches it over its own Unix-socket link,
served here by a thread of its own. Mismatch, deadlock, timeout and failure semantics are
therefore exactly the threaded ones; payloads cross through shared memory
(`shared_payloads.py`), so only the bytes of a collective are copied, once.

Workers are forked from a zygote (`zygote.py`): a process that imported torch, torch_xla and
xlasim once and never starts an XLA runtime, so a worker starts in a fraction of a second
instead of paying the ~5 s import, and a stuck worker is replaced as quickly.
"""

from __future__ import annotations

import itertools
import os
import pickle
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from multiprocessing.connection import Connection, Listener
from typing import Any

from ..base.errors import WorldAbortedError, XlasimError
from ..base.topology import Topology
from ..emulation import patches
from ..emulation.rendezvous import Run
from ..reports.hang_report import rank_span
from . import rank_coverage, shared_payloads, worker
from .zygote import zygote

STARTUP_TIMEOUT_S = 180.0
REPLY_TIMEOUT_S = 10.0
LOOPBACK = "127.0.0.1"


class _LinkServer:
    """The launching process's ends of the worker ranks' links: one serving thread per rank,
    each forwarding its rank's calls to the `Run` of the current launch."""

    def __init__(self, on_lost: Callable[[int], None]):
        self.address = f"\0xlasim-{os.getpid()}-{secrets.token_hex(8)}"  # abstract: no file
        self.authkey = os.urandom(32)
        self._listener = Listener(self.address, family="AF_UNIX", authkey=self.authkey)
        self._runs: dict[int, Run] = {}
        self._lock = threading.Lock()
        self._on_lost = on_lost
        threading.Thread(target=self._accept, name="xlasim-links", daemon=True).start()

    def open(self, job: int, run: Run) -> None:
        with self._lock:
            self._runs[job] = run

    def close(self, job: int) -> None:
        with self._lock:
            self._runs.pop(job, None)

    def shutdown(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                connection = self._listener.accept()
            except (OSError, EOFError):
                return  # listener closed
            except Exception:
                continue  # a client that failed authentication
            threading.Thread(
                target=self._serve, args=(connection,), name="xlasim-link", daemon=True
            ).start()

    def _run(self, job: int) -> Run:
        with self._lock:
            run = self._runs.get(job)
        if run is None:
            raise WorldAbortedError(XlasimError(f"job {job} is over"))
        return run

    def _serve(self, connection: Connection) -> None:
        _, rank, pid = connection.recv()
        receiver, sender = shared_payloads.Receiver(), shared_payloads.Sender()
        try:
            while True:
                request, payload = receiver.receive(connection)
                try:
                    answer = self._answer(rank, request, payload)
                except BaseException as error:  # the rank raises it, as a thread would
                    sender.send(connection, ("error", _portable(error)), None)
                    continue
                sender.send(connection, ("ok", None), answer)
                if answer is not None:
                    answer.release()
        except (EOFError, OSError):
            self._on_lost(pid)  # that worker process went away (or was replaced)
        finally:
            connection.close()

    def _answer(self, rank: int, request: tuple, payload: Any) -> shared_payloads.Message | None:
        kind, job = request[0], request[1]
        run = self._run(job)
        if kind == "gather":
            _, _, participants, call, combine = request
            encoded = _encoding(combine, run.here(participants))
            return run.gather(rank, participants, call, payload, encoded)
        if kind == "send":
            _, _, channel, call = request
            run.send(rank, channel, call, payload)
            return None
        if kind == "receive":
            _, _, channel, call = request
            return shared_payloads.encode(run.receive(rank, channel, call))
        if kind == "point":
            _, _, point, detail = request
            run.point(rank, point, detail)
            return None
        if kind == "debug":  # a line typed at the terminal, or nothing (docs/debugging.md)
            _, _, question = request
            return shared_payloads.encode(run.debug(rank, question))
        if kind == "finish":  # the outcome, and its result through shared memory
            _, _, outcome = request
            outcome.result = payload
            run.finish(outcome)
            return None
        raise XlasimError(f"unknown request {kind!r} from rank {rank}")


def _loopback_store() -> Any:
    """The world's `xla://` store (a TCPStore server), reachable from this machine only.

    TCPStore's own server listens on every interface (`*:PORT`), so any host that reaches
    this one could read and write the keys the ranks rendezvous through; it is handed a socket
    bound to loopback instead (`master_listen_fd`), which it owns and closes with itself."""
    import torch.distributed as dist

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind((LOOPBACK, 0))
        listener.listen(socket.SOMAXCONN)
        port = listener.getsockname()[1]
        store = dist.TCPStore(
            LOOPBACK,
            port,
            is_master=True,
            wait_for_workers=False,
            master_listen_fd=listener.fileno(),
        )
        listener.detach()  # the store's now
    return store


#: What a crash of a process that runs several ranks as threads may be (docs/fidelity.md):
#: torch_xla 2.9 registers each CPU-fallback op's counter in an unguarded map
#: (`_fallback_counters` in aten_fallback.cpp), so two threads of one process that run an op's
#: first fallback at once (`.item()`, `nonzero`, ...) can crash or hang it, on a TPU v2/v3 host too.
_SHARED_PROCESS_CRASH_HINT = (
    " (its ranks are threads of one process: unless a rank ended it on purpose, torch_xla 2.9 "
    "crashes this way when two of them run the first CPU fallback of an op at the same time, "
    "e.g. `.item()` or `nonzero`; see docs/fidelity.md)"
)
_CRASH_SIGNALS = (signal.SIGSEGV, signal.SIGABRT)


def _how_it_ended(exitcode: int | None, ranks: int) -> str:
    if exitcode is None:
        return "broke its link to this process"
    if exitcode < 0:
        crashed = -exitcode in _CRASH_SIGNALS
        hint = _SHARED_PROCESS_CRASH_HINT if ranks > 1 and crashed else ""
        return f"was killed by {signal.Signals(-exitcode).name}{hint}"
    return f"exited with code {exitcode}"


def _encoding(combine: Callable | None, participants: int) -> Callable[[list], Any]:
    """The rendezvous' combine, followed by encoding its result once for every participant."""

    def combine_and_encode(payloads: list) -> shared_payloads.Message:
        result = combine(payloads) if combine is not None else payloads
        return shared_payloads.encode(result).share(participants)

    return combine_and_encode


def _portable(error: BaseException) -> BaseException:
    try:
        pickle.dumps(error)
        return error
    except Exception:
        return XlasimError(f"{type(error).__name__}: {error}")


def _pickle_jobs(jobs: dict) -> bytes:
    try:
        return pickle.dumps(jobs, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as error:
        raise XlasimError(
            "the function and its arguments must be picklable to run in worker processes "
            f"(as with xmp.spawn on a TPU VM): {type(error).__name__}: {error}"
        ) from error


def _main_path() -> str | None:
    """The launching script, which workers import (as multiprocessing's spawn does) so that
    functions defined in it can be found, even inside payloads pickled by the caller. By its
    absolute path: workers of other emulated hosts work in their own directories, where a path
    relative to the launching one (`xlasim run jobs/train.py`) names nothing."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    return os.path.abspath(path) if path and os.path.isfile(path) else None


@contextmanager
def _main_left_alone() -> Iterator[None]:
    """Start a worker without multiprocessing importing the launching script into it: that
    would run the script's module-level code before the worker is set up. Each job imports the
    script itself, when its function lives there (`worker._import_main`)."""
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


class _Process:
    """One worker process and the pipe that controls it."""

    def __init__(self, spec: worker.WorkerSpec):
        context = zygote()
        self.index = spec.process
        per_process = spec.topology.cores_per_process
        self.ranks = range(spec.process * per_process, (spec.process + 1) * per_process)
        self.control, child = context.Pipe()
        self.process = context.Process(
            target=worker.main,
            name=f"xlasim-process-{spec.process}",
            daemon=True,
            args=(spec, child),
        )
        with _main_left_alone():
            self.process.start()
        child.close()
        self.lock = threading.Lock()
        self.ready = False

    def wait_ready(self) -> None:
        """Block until the worker has started its ranks (at once if it already has)."""
        with self.lock:
            if self.ready:
                return
            if not self.control.poll(STARTUP_TIMEOUT_S):
                raise XlasimError(
                    f"worker process {self.index} did not start within {STARTUP_TIMEOUT_S:g} s"
                )
            try:
                self.control.recv()
            except EOFError:
                self.process.join(5)
                raise XlasimError(
                    f"worker process {self.index} died while starting (exit code "
                    f"{self.process.exitcode}); its output above says why"
                ) from None
            self.ready = True

    def send(self, message: tuple) -> None:
        with self.lock:
            self.control.send(message)

    def where(self) -> dict[int, tuple[str, str]]:
        return self.ask("where") or {}

    def ask(self, request: str) -> Any:
        """A request the worker answers on its control pipe (`where`, `flush`); None when it
        cannot answer (not started, gone, or silent past the reply bound)."""
        with self.lock:
            if not self.ready or not self.process.is_alive():
                return None
            self.control.send((request,))
            if not self.control.poll(REPLY_TIMEOUT_S):
                return None
            return self.control.recv()[1]

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.terminate()
        self.process.join(5)


class ProcessRanks:
    """Every rank of a multi-process topology, in warm worker processes."""

    def __init__(self, topology: Topology):
        self.topology = topology
        #: Worker processes (by pid) whose links broke: a replaced worker's old links break
        #: after it is replaced, so lost ranks would wrongly mark its successor.
        self._lost: set[int] = set()
        self._links = _LinkServer(self._lost.add)
        self._store = _loopback_store()
        hosts = self.local_hosts()
        # The launching host works in the launching directory; every other host has its own.
        self._host_roots: dict[int, str | None] = {
            h: None
            if h == hosts.start
            else tempfile.mkdtemp(prefix=f"xlasim-{os.getpid()}-host{h}-")
            for h in hosts
        }
        per_host = topology.processes_per_host
        local = range(hosts.start * per_host, hosts.stop * per_host)
        #: This machine's worker processes, by process index.
        self._processes = {p: self._start(p) for p in local}
        for process in self._processes.values():
            process.wait_ready()
        self._jobs = itertools.count()
        self._job: int | None = None

    def local_hosts(self) -> range:
        """The emulated hosts this machine holds: all of them (a pod's machines hold a share,
        xlasim/machines)."""
        return range(self.topology.hosts)

    def _start(self, index: int) -> _Process:
        spec = worker.WorkerSpec(
            process=index,
            topology=self.topology,
            address=self._links.address,
            authkey=self._links.authkey,
            host_root=self._host_roots[index // self.topology.processes_per_host],
            store_port=self._store.port,
            more_patches=patches.installed_with(),
        )
        return _Process(spec)

    def dispatch(self, run: Run, jobs: list[tuple[Callable[..., Any], tuple, dict]]) -> None:
        """Send each worker process holding ranks of the run its ranks' jobs, pickled, once
        every such worker is ready (a worker that died since the last launch is replaced).

        Args:
            run: the launch's shared state, which the workers' ranks reach over their links.
            jobs: one `(fn, args, kwargs)` per rank of the run, in rank order.
        """
        job = next(self._jobs)
        self._job = job
        self._links.open(job, run)
        dead = [p.index for p in self._processes.values() if not p.process.is_alive()]
        if dead:  # died between launches: start afresh rather than send it a job
            self.recover([self._processes[i].ranks.start for i in dead])
        involved = [p for p in self._processes.values() if p.ranks.start < len(jobs)]
        coverage = rank_coverage.requested()
        specs = {}
        for process in involved:
            mine = {r: jobs[r] for r in process.ranks if r < len(jobs)}
            specs[process.index] = worker.JobSpec(
                job,
                len(jobs),
                _pickle_jobs(mine),
                list(sys.path),
                dict(os.environ),
                os.getcwd(),
                _main_path(),
                run.collect,
                coverage,
            )
        for process in involved:  # every worker ready before any rank starts waiting on others
            process.wait_ready()
        for process in involved:
            process.send(("job", specs[process.index]))

    def check(self, run: Run) -> None:
        """Abort the run when a worker process died under its ranks."""
        for process in self._processes.values():
            if process.ranks.start >= run.size:
                continue  # not in this (sub-)world
            if process.process.is_alive() and process.process.pid not in self._lost:
                continue
            process.process.join(0.5)
            if run.desk is not None:  # a rank of it stopped in a debugger is stopped no more
                run.desk.forget(process.ranks)
            ended = _how_it_ended(process.process.exitcode, len(process.ranks))
            run.abort(
                XlasimError(
                    f"worker process {process.index} ({rank_span(process.ranks)}) {ended} during "
                    "the run; the other ranks were released. Where every rank was:\n"
                    + run.describe_ranks()
                )
            )

    def location(self, rank: int) -> str:
        return self._where(rank)[0]

    def stack(self, rank: int) -> str:
        return self._where(rank)[1]

    def _where(self, rank: int) -> tuple[str, str]:
        process = self._processes[self.topology.process_of(rank)]
        if not process.process.is_alive():
            return ("<nowhere: its worker process is gone>", "    (no stack)\n")
        return process.where().get(rank, ("<process not answering>", "    (no stack)\n"))

    def flush_records(self) -> None:
        """Have every worker write out what its ranks recorded: events (docs/events.md) and
        coverage data (`rank_coverage.py`)."""
        for process in self._processes.values():
            process.ask("flush")

    def finished(self, run: Run) -> None:
        if self._job is not None:
            self._links.close(self._job)

    def recover(self, stuck: list[int]) -> None:
        """Processes with ranks still busy after an abort (or gone) are replaced by fresh ones,
        which start in the background: the next dispatch waits for them."""
        gone = {p.index for p in self._processes.values() if p.process.pid in self._lost}
        for index in sorted({self.topology.process_of(r) for r in stuck} | gone):
            self._processes[index].stop()
            self._processes[index] = self._start(index)

    def close(self) -> list[int]:
        """Stop every worker process (terminated if it does not stop by itself)."""
        deadline = time.monotonic() + 5
        for process in self._processes.values():
            if process.process.is_alive():
                with suppress(OSError):
                    process.send(("stop",))
        for process in self._processes.values():
            process.process.join(max(0.0, deadline - time.monotonic()))
            process.stop()
        self._links.shutdown()
        self._store = None  # closes its listening socket
        for root in self._host_roots.values():
            if root is not None:
                shutil.rmtree(root, ignore_errors=True)
        return []
