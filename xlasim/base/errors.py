"""The errors xlasim raises.

Every error names the cause and the rank(s) involved: on a real TPU slice the same situations
hang with no message, so the text of these errors is the product.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .public import public


class RankResult(Protocol):
    """What `RankFailedError` reads of a rank's outcome (`xlasim.reports.rank_outcome.RankOutcome`,
    a layer above: the error names the shape it needs, not the class)."""

    rank: int
    error: BaseException | None
    traceback: str

    @property
    def raised(self) -> bool: ...

    def portable(self) -> RankResult: ...


@public
class XlasimError(RuntimeError):
    """Base class of every error raised by the emulator."""


@public
class RuntimeAlreadyStartedError(XlasimError):
    """The XLA runtime started before emulation could choose its device count."""


@public
class DeviceCountError(XlasimError, ValueError):
    """An impossible number of emulated devices was asked for."""


@public
class OutsideWorldError(XlasimError):
    """A collective or rank-only API was called from a thread that is not a rank."""


@public
class CollectiveMismatchError(XlasimError):
    """Ranks called collectives that cannot be matched (another op, shape, dtype, group...)."""


@public
class DeadlockError(CollectiveMismatchError):
    """Every live rank waits and no wait can ever be satisfied: ranks disagree on what comes next."""


@public
class CollectiveTimeoutError(XlasimError):
    """A rank never arrived within the bound; the report lists where every rank was."""


@public
class ScheduleStalledError(CollectiveTimeoutError):
    """Under a schedule (docs/races.md), the rank whose turn it was reached no scheduling point
    within the bound; the report lists where every rank was."""


@public
class WorldAbortedError(XlasimError):
    """Raised inside a rank that was released because the run was aborted by another cause."""

    def __init__(self, cause: BaseException | str):
        name = cause if isinstance(cause, str) else type(cause).__name__
        super().__init__(f"released: the run was aborted ({name})")
        self.cause = cause

    def __reduce__(self):
        # Only the cause's name crosses processes: the cause itself may not pickle (pytest's
        # Skipped does not), and a release must stay a release on the other side.
        name = self.cause if isinstance(self.cause, str) else type(self.cause).__name__
        return (type(self), (name,))


@public
class UnsupportedCollectiveError(XlasimError):
    """A collective the emulation cannot serve where it is called: an XLA-level collective that
    bypasses torch_xla's Python API, or one in a graph the openxla bridge runs as one XLA program."""


@public
class PodJoinError(XlasimError):
    """Machines could not form a pod: a wrong or missing token, a machine rank taken or out of
    range, or machines that never joined within the bound (xlasim/machines, docs/pods.md)."""


@public
class MachineLostError(XlasimError):
    """Another machine of the pod died, left, or failed during a run; names the machine, its
    hosts and ranks, and what it said or how it went. `machine`: its machine rank, when one
    machine is to blame."""

    def __init__(self, message: str, machine: int | None = None):
        super().__init__(message)
        self.machine = machine

    def __reduce__(self):
        return (type(self), (str(self), self.machine))


@public
class RankExitError(XlasimError):
    """A rank that is a thread of the launching process (the threads mode) called `os._exit`
    or `os.abort`: on a TPU VM that ends the rank's own process; here it would end every
    rank and the caller with no report, so it is raised in the rank instead."""


class RankAbandoned(BaseException):
    """Raised inside a rank thread that was given up on (its run timed out, or the world
    closed while it was busy) so that it unwinds instead of running on."""


@public
class RankFailedError(XlasimError):
    """One or more ranks raised; holds every rank's `RankOutcome` (`xlasim.reports.rank_outcome`), and by
    rank the failing ones' exceptions and formatted tracebacks."""

    def __init__(self, message: str, outcomes: Sequence[RankResult]):
        super().__init__(message)
        self.outcomes = list(outcomes)

    def __str__(self) -> str:  # not the rank's exception type's own (KeyError quotes its text)
        return str(self.args[0])

    def __reduce__(self):
        return (RankFailedError, (str(self), [o.portable() for o in self.outcomes]))

    @property
    def failures(self) -> dict[int, BaseException]:
        return {o.rank: o.error for o in self.outcomes if o.raised}  # type: ignore[misc]

    @property
    def tracebacks(self) -> dict[int, str]:
        return {o.rank: o.traceback for o in self.outcomes if o.raised}

    @property
    def ranks(self) -> list[int]:
        return sorted(self.failures)


def launch_inside_rank(rank: int) -> RuntimeError:
    """The error for a launch from inside a rank: a TPU process cannot spawn a second slice
    from a spawned function, so neither can an emulated rank (in any topology)."""
    return RuntimeError(
        f"a world cannot be launched from inside rank {rank}: "
        "xmp.spawn / torch_xla.launch were called from a spawned function"
    )
