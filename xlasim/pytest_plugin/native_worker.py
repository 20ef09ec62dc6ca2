"""What runs inside the native backend's worker processes (started by the real `xmp.spawn`).

Each spawned rank connects back to the pytest process and serves jobs until told to stop, so
the workers (and their XLA runtime and compilation cache) stay warm across tests. A job is a
pickled `(fn, args, kwargs)`; functions are pickled by reference, so the worker first puts the
parent's `sys.path` in place and imports test modules the way pytest did, with their asserts
rewritten, so a failing assert reads as it does in one process.
"""

from __future__ import annotations

import faulthandler
import importlib
import importlib.util
import io
import os
import pickle
import signal
import sys
import threading
import traceback
from multiprocessing.connection import Client
from pathlib import Path
from typing import Any

from .capture import Router

STACK_SIGNAL = signal.SIGUSR1
_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent)
_local = threading.local()
#: A worker process serves one rank per device thread (CPU, TPU v2/v3): they share its setup.
_process_lock = threading.Lock()


def _setup_process(stack_dir: str) -> None:
    """Once per process: stacks on request, and output routed to each thread's current job."""
    if isinstance(sys.stdout, Router):
        return
    stacks = open(Path(stack_dir) / f"{os.getpid()}.txt", "w")  # noqa: SIM115 (lives as long as the process)
    faulthandler.register(STACK_SIGNAL, file=stacks, all_threads=True)
    sys.stdout = Router(sys.stdout, lambda: getattr(_local, "out", None))
    sys.stderr = Router(sys.stderr, lambda: getattr(_local, "err", None))


def _import_rewritten(modules: dict[str, str]) -> None:
    """Import test modules as pytest did, asserts rewritten (plain import when that fails)."""
    for name, path in modules.items():
        if name in sys.modules:
            continue
        if "." in name:
            importlib.import_module(name.rpartition(".")[0])
        try:
            from _pytest.assertion.rewrite import _rewrite_test

            _, code = _rewrite_test(Path(path), None)  # type: ignore[arg-type]
        except Exception:
            importlib.import_module(name)
            continue
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[name] = module
        exec(code, module.__dict__)


def _portable(value: Any) -> Any:
    """`value` if it pickles; otherwise a stand-in that says what it was."""
    try:
        pickle.dumps(value)
        return value
    except Exception:
        if isinstance(value, BaseException):
            return RuntimeError(f"{type(value).__name__}: {value} (the original did not pickle)")
        return f"<unpicklable {type(value).__name__}: {value!r:.200}>"


def _run_job(sys_path: list[str], modules: dict[str, str], payload: bytes) -> dict[str, Any]:
    from .metrics import counts

    _local.out, _local.err = io.StringIO(), io.StringIO()
    reply: dict[str, Any] = {}
    before = counts()
    try:
        with _process_lock:
            sys.path[:] = sys_path
            _import_rewritten(modules)
            fn, args, kwargs = pickle.loads(payload)
        reply["result"] = _portable(fn(*args, **kwargs))
    except BaseException as error:  # every failure goes back to the parent
        tb = error.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_PACKAGE_DIR):
            tb = tb.tb_next  # start the report at the user's code, as pytest does
        reply["error"] = _portable(error)
        reply["traceback"] = "".join(traceback.format_exception(type(error), error, tb))
    after = counts()
    after.subtract(before)
    reply["metrics"] = dict(+after)
    reply["stdout"], reply["stderr"] = _local.out.getvalue(), _local.err.getvalue()
    _local.out = _local.err = None
    return reply


def serve(index: int, address: str, authkey: bytes, stack_dir: str) -> None:
    """The function `xmp.spawn` runs on every rank: serve jobs until the parent says stop."""
    with _process_lock:
        _setup_process(stack_dir)
    with Client(address, authkey=authkey) as conn:
        conn.send((index, os.getpid()))
        while (job := conn.recv()) is not None:
            conn.send(_run_job(*job))
