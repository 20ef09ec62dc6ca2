"""Whether this process was forked from one whose XLA runtime had started, and the error for it.

torch_xla's runtime does not survive a fork: the child keeps the parent's client object but none
of its threads, so its first execution or transfer waits forever in native code, natively as
under xlasim (`fixtures/fork_after_runtime_start.py`). A TPU VM's test process seldom meets it:
its runtime starts in the processes `xmp.spawn` makes. An emulated slice's ranks are threads of
the test process, so a test that forks a `ProcessPoolExecutor` after a launch (torch_xla's
`pjrt/test_runtime_tpu.py` does) meets it. The hooks here record, at each fork, whether the
runtime had started; the waits xlasim owns in the child (a launch, a step marker) then fail at
once with `refuse_after_fork` instead of hanging.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import RuntimeAlreadyStartedError


@dataclass(frozen=True)
class Fork:
    """The fork this process came from: its parent, and whether the parent's XLA runtime had
    started by then."""

    parent: int
    runtime_started: bool


#: In a forked child: the fork it came from. `_forking` holds it in the parent during a fork.
_inherited: Fork | None = None
_forking: Fork | None = None


def _runtime_started() -> bool:
    torch_xla = sys.modules.get("torch_xla")
    return torch_xla is not None and torch_xla._XLAC._xla_runtime_is_initialized()


def _before() -> None:
    global _forking
    _forking = Fork(parent=os.getpid(), runtime_started=_runtime_started())


def _after_in_parent() -> None:
    global _forking
    _forking = None


def _after_in_child() -> None:
    global _inherited, _forking
    _inherited, _forking = _forking, None


os.register_at_fork(
    before=_before, after_in_parent=_after_in_parent, after_in_child=_after_in_child
)


def inherited() -> Fork | None:
    """The fork this process came from, or None (not forked, or forked before these hooks)."""
    return _inherited


def refuse_after_fork(what: str, cause: str | None = None) -> None:
    """Raise when this process was forked after its parent's XLA runtime started (or for
    `cause`, when the caller knows another reason the fork left it nothing to run on).

    Args:
        what: what was about to wait (`a launch`, `torch_xla.sync()`), named in the error.
        cause: another reason, said after "after": the caller's own (None: the runtime's only).

    Raises:
        RuntimeAlreadyStartedError: naming this process, its parent and the cause.
    """
    fork = _inherited
    if fork is None or not (fork.runtime_started or cause):
        return
    because = "its XLA runtime was already initialized" if fork.runtime_started else cause
    raise RuntimeAlreadyStartedError(
        f"{what} in process {os.getpid()}, which was forked from process {fork.parent} after "
        f"{because}: the child has none of the parent's rank threads or XLA runtime threads, "
        "and torch_xla's computations in a child forked after the runtime started hang "
        "(natively too). Start the child before the first use of an XLA device, or with the "
        "'spawn' start method (multiprocessing.get_context('spawn'), which torch_xla's own "
        "launchers use)."
    )


def refusing_after_fork(original: Callable[..., Any], what: str) -> Callable[..., Any]:
    """`original` (a torch_xla entry point that executes graphs and waits for them), refusing
    first in a child forked after its parent's runtime started, where it would wait forever.

    Args:
        original: the function to guard.
        what: its name as the error says it (`torch_xla.sync()`).
    """

    @functools.wraps(original)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if _inherited is not None:
            refuse_after_fork(what)
        return original(*args, **kwargs)

    return guarded
