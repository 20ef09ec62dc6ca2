"""What each rank did in one run, and how N per-rank outcomes become the one test outcome.

Both backends report a `RankOutcome` per rank. `settle` turns them into what pytest expects
from a test call: return (every rank passed), or raise exactly one exception. Skips and xfails
only count when every rank took them: a rank that leaves early while the others carry on is,
on a TPU, a slice that hangs at the next collective, so it is reported as a failure.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from _pytest.outcomes import Skipped, XFailed

from xlasim.run import rank_span as span

from ..errors import RankFailedError, XlasimError
from .remote import PACKAGE_DIR


@dataclass
class RankOutcome:
    """One rank's end: returned `result`, raised `error`, or was `released` by an abort."""

    rank: int
    size: int
    result: Any = None
    error: BaseException | None = None
    #: Formatted traceback of `error` as the rank saw it.
    traceback: str = ""
    #: False when `error` was sent from a worker process: its frames stayed there.
    local_frames: bool = True
    #: pytest's rendering of `error`, made where its frames were (ranks in other processes).
    repr: Any = None
    stdout: str = ""
    stderr: str = ""
    released: bool = False
    #: XLA counters this rank's process added during the run (native backend only).
    metrics: dict[str, int] | None = None

    @property
    def label(self) -> str:
        return f"rank {self.rank}/{self.size}"

    @property
    def failed(self) -> bool:
        return self.error is not None and not isinstance(self.error, (Skipped, XFailed))


class RanksFailed(RankFailedError):
    """Raised by `xla_world.run` when ranks raised; carries every rank's outcome for the report,
    and a `hint` line the report adds (empty when there is nothing to add)."""

    hint = ""

    def __init__(self, outcomes: Sequence[RankOutcome]):
        failing = [o for o in outcomes if o.error is not None]
        first = failing[0].error
        super().__init__(
            f"{span([o.rank for o in failing])} of {outcomes[0].size} raised "
            f"{type(first).__name__}: {first}",
            {o.rank: o.error for o in failing},
            {o.rank: o.traceback for o in failing},
        )
        self.outcomes = list(outcomes)
        self.__cause__ = first


#: Python's own complaints when a call's arguments do not fit the function's parameters.
_BINDING = re.compile(
    r"^[\w.<>]+\(\) (takes |missing \d+ required |got an unexpected keyword argument "
    r"|got multiple values for argument |got some positional-only arguments )"
)


#: The hint a report adds when a function met the other rank-argument convention.
WORLD_RUN_CONVENTION = (
    "xlasim: xla_world.run(fn, *args) calls fn(*args) on every rank, with no rank argument (as "
    "torch_xla's pjrt.run_multiprocess does): fn asks xr.global_ordinal() or "
    "xlasim.current().rank; xmp.spawn and xlasim.world().run are the ones that pass the rank"
)
CORE_RUN_CONVENTION = (
    "xlasim: xmp.spawn(fn, args) and xlasim.world().run(fn, args) call fn(rank, *args) on every "
    "rank; the xla_world fixture's run(fn, *args) is the one that calls fn(*args)"
)


def never_called(errors: Sequence[BaseException], tracebacks: Sequence[str]) -> bool:
    """Whether every rank's call failed on its arguments before any of the function ran (a
    `TypeError` from the call itself: no frame of user code in its traceback). That is the
    sign of a function written for the other rank-argument convention."""
    return bool(errors) and all(
        type(error) is TypeError and _BINDING.match(str(error)) and not _user_frames(error, text)
        for error, text in zip(errors, tracebacks)
    )


def _user_frames(error: BaseException, text: str) -> bool:
    """Whether any frame outside xlasim ran, by the exception's own frames when it has them
    (ranks in this process), else by its formatted traceback (ranks elsewhere)."""
    if error.__traceback__ is not None:
        return any(
            not entry.filename.startswith(PACKAGE_DIR)
            for entry in traceback.extract_tb(error.__traceback__)
        )
    return any(
        not line.strip().removeprefix('File "').startswith(PACKAGE_DIR)
        for line in text.splitlines()
        if line.strip().startswith('File "')
    )


class InconsistentOutcomeError(XlasimError):
    """Some ranks skipped or xfailed and others did not: the test has no single outcome."""


outcomes_key = pytest.StashKey[list[RankOutcome]]()


def results(outcomes: Sequence[RankOutcome]) -> list[Any]:
    """The per-rank results, or `RanksFailed` when any rank raised."""
    if any(o.error is not None for o in outcomes):
        raise RanksFailed(outcomes)
    return [o.result for o in outcomes]


def settle(outcomes: Sequence[RankOutcome]) -> None:
    """Return when every rank passed; otherwise raise the one exception that is the test outcome.

    A real failure wins over everything and is raised as the lowest failing rank's own exception
    (so `xfail(raises=...)` and `pytest.raises` around a world behave as for one process).
    """
    failed = [o for o in outcomes if o.failed]
    if failed:
        raise failed[0].error  # type: ignore[misc]
    left = [o for o in outcomes if o.error is not None]
    if not left:
        return
    kinds = {type(o.error) for o in left}
    if len(left) == len(outcomes) and len(kinds) == 1:
        raise left[0].error  # type: ignore[misc]
    raise InconsistentOutcomeError(_inconsistency(outcomes))


def _inconsistency(outcomes: Sequence[RankOutcome]) -> str:
    groups: dict[str, list[int]] = {}
    for o in outcomes:
        if isinstance(o.error, Skipped):
            what = f"skipped ({o.error.msg})"
        elif isinstance(o.error, XFailed):
            what = f"xfailed ({o.error.msg})"
        elif o.released:
            what = "released from a collective wait when the run was aborted"
        else:
            what = "ran to the end"
        groups.setdefault(what, []).append(o.rank)
    lines = "\n".join(f"  {span(ranks)}: {what}" for what, ranks in groups.items())
    return (
        "ranks disagree on the outcome of the test; skip or xfail on every rank (decide it from "
        "values every rank shares, or before the ranks start):\n" + lines
    )


def replay_output(outcomes: Sequence[RankOutcome]) -> None:
    """Write the output of ranks that did not fail to this process's streams, each line tagged
    `[rank r/n]`, so pytest's usual capture shows it (failing ranks show theirs in the report)."""
    import sys

    for o in outcomes:
        if o.error is not None and not isinstance(o.error, (Skipped, XFailed)):
            continue
        for text, stream in ((o.stdout, sys.stdout), (o.stderr, sys.stderr)):
            if text:
                stream.write("".join(f"[{o.label}] {line}" for line in text.splitlines(True)))
                if not text.endswith("\n"):
                    stream.write("\n")
