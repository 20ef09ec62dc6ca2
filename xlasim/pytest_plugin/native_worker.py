"""What runs inside the native backend's worker processes (started by the real `xmp.spawn`).

Each spawned rank connects back to the pytest process and serves jobs until told to stop, so
the workers (and their XLA runtime and compilation cache) stay warm across tests. A job is a
`remote.Job`: the worker puts the parent's `sys.path` in place, imports test modules the way
pytest did (from their paths, asserts rewritten), runs it and replies with its result or its
failure rendered as pytest would have (see `remote`).
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
from multiprocessing.connection import Client
from pathlib import Path
from typing import Any

from . import remote

STACK_SIGNAL = signal.SIGUSR1
_stacks_file = None


def _setup_process(stack_dir: str) -> None:
    """Once per process: stacks on request, and output routed to each thread's current job."""
    global _stacks_file
    if _stacks_file is None:
        _stacks_file = open(Path(stack_dir) / f"{os.getpid()}.txt", "w")  # noqa: SIM115 (lives as long as the process)
        faulthandler.register(STACK_SIGNAL, file=_stacks_file, all_threads=True)
    remote.install_router()


def _run_job(sys_path: list[str], job: remote.Job) -> dict[str, Any]:
    from .metrics import counts

    before = counts()
    with remote._process_lock:  # a worker process serves one rank per device thread on CPU
        sys.path[:] = sys_path
    result, error, reply = remote.execute(job)
    if error is None:
        reply["result"] = remote.portable_result(result)
    else:
        reply["error"] = remote.portable(error)
    after = counts()
    after.subtract(before)
    reply["metrics"] = dict(+after)
    return reply


def serve(index: int, address: str, authkey: bytes, stack_dir: str) -> None:
    """The function `xmp.spawn` runs on every rank: serve jobs until the parent says stop."""
    with remote._process_lock:
        _setup_process(stack_dir)
    with Client(address, authkey=authkey) as conn:
        conn.send((index, os.getpid()))
        while (job := conn.recv()) is not None:
            conn.send(_run_job(*job))
