"""How one rank's call of a launched function ended: one value from the rank to the report.

Every way of running ranks (threads of this process, worker processes of a multi-process
world, the pytest plugin's native `xmp.spawn` workers) ends each rank's call in a
`RankOutcome`, made where the rank ran (`call`), by the same code. It holds what a report
needs: the result or the exception with its traceback (formatted there, from the user's first
frame), the rank's captured output, the XLA counters its process added, the duration, and a
rendering of the failure made where the frames were (`Collect.render`, e.g. pytest's own).

An outcome crosses a process boundary as itself (pickled): the exception travels as the same
type when it can be pickled at all, is rebuilt from its class, args and state when it cannot
but its class can be found (pytest's `Skipped` and `Failed` claim to be builtins), and becomes
an `XlasimError` naming it otherwise (a class defined inside a function); a result that does not pickle becomes an error naming it
(`portable`). The formatted traceback is text and always crosses.
"""

from __future__ import annotations

import dataclasses
import importlib
import pickle
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from ..base.errors import RankAbandoned, WorldAbortedError, XlasimError
from ..base.public import public
from ..events import hooks
from . import rank_debugger, rank_output
from .frames import user_traceback


@public
@dataclass(frozen=True)
class Collect:
    """What a run's ranks record in their outcomes beyond result and error."""

    #: Capture each rank's stdout/stderr (`RankOutcome.stdout`, `.stderr`).
    output: bool = False
    #: With `output`: also pass it through to the stream underneath, live.
    tee: bool = False
    #: Measure the XLA counters each process added over the run (`RankOutcome.metrics`).
    metrics: bool = False
    #: Called with a rank's exception where it was raised (its frames are there); what it
    #: returns is kept as `RankOutcome.rendering`. Must pickle for ranks in other processes.
    render: Callable[[BaseException], Any] | None = None
    #: Record the ranks' file accesses and synchronisations (race detection, xlasim.races).
    races: bool = False
    #: Take turns as this seed's schedule decides (xlasim.races.scheduler), or run freely.
    schedule: int | None = None


#: Outcomes with the result or the error, and nothing more.
RESULT_ONLY = Collect()


@public
@dataclass
class RankOutcome:
    """One rank's end: it returned `result`, or raised `error`."""

    rank: int
    size: int
    result: Any = None
    error: BaseException | None = None
    #: `error` formatted where it was raised, the user's frames only.
    traceback: str = ""
    stdout: str = ""
    stderr: str = ""
    #: XLA counters the rank's process added during the run, on the last of its ranks to
    #: finish (None on the others, and when not collected).
    metrics: dict[str, int] | None = None
    #: Seconds the rank's function ran.
    duration: float = 0.0
    #: What `Collect.render` made of `error` where it was raised.
    rendering: Any = None
    #: The rank's file accesses, when its run detects races (`xlasim.races.Access`).
    accesses: list | None = None
    #: Accesses race detection could not record, each a sentence (the launch then fails).
    unrecorded: list[str] | None = None

    @property
    def released(self) -> bool:
        """The rank did not fail by itself: it was released from a wait when the run was
        aborted for another cause (or given up on)."""
        return isinstance(self.error, (WorldAbortedError, RankAbandoned))

    @property
    def raised(self) -> bool:
        """The rank's own function raised."""
        return self.error is not None and not self.released

    @property
    def label(self) -> str:
        return f"rank {self.rank}/{self.size}"

    def portable(self) -> RankOutcome:
        """This outcome as it can cross to another process: a result or rendering that does
        not pickle is replaced (the result by an error naming it); the error pickles always."""
        outcome = self
        if outcome.error is None and not _pickles(outcome.result):
            outcome = dataclasses.replace(
                outcome,
                result=None,
                error=XlasimError(
                    f"rank {self.rank} returned an object that cannot be pickled to the "
                    f"parent process: {type(self.result).__name__}"
                ),
            )
        if outcome.rendering is not None and not _pickles(outcome.rendering):
            outcome = dataclasses.replace(outcome, rendering=None)
        return outcome

    def __reduce__(self) -> tuple[Any, ...]:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        fields["error"] = _packed(self.error)
        return (_unpack_outcome, (fields,))


def call(
    rank: int,
    size: int,
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    collect: Collect = RESULT_ONLY,
    run: Any = None,
) -> RankOutcome:
    """Call `fn(*args, **kwargs)` as `rank` of `run` and say how it ended (never raises).

    Args:
        rank: the rank the calling thread plays, global in the launch.
        size: the launch's number of ranks.
        fn: the rank's function.
        args: its positional arguments.
        kwargs: its keyword arguments.
        collect: what to keep of the call besides its result (output, a rendering of its
            error).
        run: the launch the rank belongs to, which keys its captured output (ranks of
            several launches may share a process); None where the process runs one rank.
    """
    # Output not kept still passes through whole lines at a time (rank_output's docstring).
    routing = rank_output.captured(run, rank, collect.tee or not collect.output, collect.output)
    start = time.perf_counter()
    with routing as buffers, hooks.launch(rank):
        try:
            result, error = fn(*args, **kwargs), None
        except BaseException as caught:  # every failure is reported, none is lost
            result, error = None, caught
        finally:
            rank_debugger.leave()  # a debugger session still open ends with the call
    outcome = RankOutcome(rank, size, result, error, duration=time.perf_counter() - start)
    if collect.output:
        outcome.stdout, outcome.stderr = buffers[0].getvalue(), buffers[1].getvalue()
    if error is not None:
        outcome.traceback = user_traceback(error)
        if collect.render is not None and not outcome.released:
            with suppress(Exception):  # the text traceback is there
                outcome.rendering = collect.render(error)
    return outcome


def _pickles(value: Any) -> bool:
    try:
        pickle.dumps(value)
    except Exception:
        return False
    return True


def _packed(error: BaseException | None) -> Any:
    """`error` itself when it pickles, else its class's real place and its state, else a
    stand-in that names it."""
    if error is None or _pickles(error):
        return error
    home = _real_module(type(error))
    state = (error.args, dict(getattr(error, "__dict__", {})))
    if home is not None and _pickles(state):
        return (home, type(error).__qualname__, *state)
    return XlasimError(f"{type(error).__name__}: {error} (the original did not pickle)")


def _real_module(cls: type) -> str | None:
    """Where a class that claims another module (pytest's outcomes claim `builtins`) really
    lives: the module of a function defined in it or its bases that holds it by its name."""
    for klass in cls.__mro__:
        for member in vars(klass).values():
            name = getattr(member, "__module__", None)
            module = sys.modules.get(name) if isinstance(name, str) else None
            if module is not None and getattr(module, cls.__qualname__, None) is cls:
                return name
    return None


def _unpack_outcome(fields: dict[str, Any]) -> RankOutcome:
    packed = fields["error"]
    if isinstance(packed, tuple):
        module, qualname, args, state = packed
        cls = getattr(importlib.import_module(module), qualname)
        error = cls.__new__(cls)
        error.args = args
        error.__dict__.update(state)
        fields["error"] = error
    return RankOutcome(**fields)
