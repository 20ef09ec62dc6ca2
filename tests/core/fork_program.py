"""A process with an emulated world forks children, as torch_xla's own tests do with a
`ProcessPoolExecutor` (`pjrt/test_runtime_tpu.py`, `test_persistent_cache.py`): before its XLA
runtime started and after. Prints `RESULT {...}`: what each child answered and how long it took.
`test_forks.py` runs it in a fresh process."""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import time
from collections.abc import Callable
from typing import Any

import xlasim

xlasim.emulate(devices=2, processes=1)

import torch  # noqa: E402  (after emulate: the device count is chosen before torch_xla starts)
import torch_xla  # noqa: E402
import torch_xla.core.xla_model as xm  # noqa: E402
import torch_xla.runtime as xr  # noqa: E402
from torch_xla._internal import pjrt  # noqa: E402

#: The bound on one child's answer; a child that outlives it is killed and reported as hanging.
CHILD_BOUND_S = 60.0


def _rank_value() -> float:
    ordinal = xr.global_ordinal()
    return (torch.ones(2, device=torch_xla.device()) * (ordinal + 1)).sum().item()


def launch() -> dict[int, float]:
    return pjrt.run_multiprocess(_rank_value)


def sync() -> str:
    torch.ones(2, device=torch_xla.device()).add_(1)
    torch_xla.sync()
    return "synced"


def _answer(fn: Callable[[], Any], sender: Any) -> None:
    try:
        sender.send(("returned", fn()))
    except Exception as error:
        sender.send(("raised", f"{type(error).__name__}: {error}"))


def in_forked_child(fn: Callable[[], Any]) -> dict[str, Any]:
    """`fn()` in a child forked from this process: what it returned or raised, and the
    seconds it took; a child that does not answer within the bound is killed."""
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    began = time.monotonic()
    child = context.Process(target=_answer, args=(fn, sender))
    child.start()
    answered = receiver.poll(CHILD_BOUND_S)
    outcome = receiver.recv() if answered else ("hung", f"no answer in {CHILD_BOUND_S:g} s")
    if child.is_alive():
        child.kill()
    child.join()
    return {"outcome": list(outcome), "seconds": time.monotonic() - began}


xlasim.world()  # the world is started, its rank threads idle, as the plugin leaves it
result: dict[str, Any] = {
    "pid": os.getpid(),
    "started_with_world": torch_xla._XLAC._xla_runtime_is_initialized(),
    "pickles_by_reference": pickle.loads(pickle.dumps(xm.get_xla_supported_devices))
    is xm.get_xla_supported_devices,
    "before": {"launch": in_forked_child(launch)},
    "parent_launch": launch(),
}
result["after"] = {"launch": in_forked_child(launch), "sync": in_forked_child(sync)}
print("RESULT " + json.dumps(result))
