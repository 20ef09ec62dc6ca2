"""How N per-rank outcomes become the one test outcome.

Every backend returns the core's `xlasim.reports.rank_outcome.RankOutcome` for each rank, made where the
rank ran. `settle` turns them into what pytest expects from a test call: return (every rank
passed), or raise exactly one exception. Skips and xfails only count when every rank took
them: a rank that leaves early while the others carry on is, on a TPU, a slice that hangs at
the next collective, so it is reported as a failure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pytest
from _pytest.outcomes import Skipped, XFailed

from xlasim.reports.hang_report import rank_span as span

from ...base.errors import RankFailedError, XlasimError
from ...reports.frames import has_user_frames
from ...reports.rank_outcome import RankOutcome


def failed(outcome: RankOutcome) -> bool:
    """The rank's function raised, and not a skip or xfail (those count when every rank did)."""
    return outcome.raised and not isinstance(outcome.error, (Skipped, XFailed))


class RanksFailed(RankFailedError):
    """Raised by `xla_world.run` when ranks raised: its message is a summary line (the report
    shows each rank's section), and `hint` a line the report adds (empty when there is none)."""

    hint = ""

    def __init__(self, outcomes: Sequence[RankOutcome]):
        failing = [o for o in outcomes if o.raised]
        first = failing[0].error
        super().__init__(
            f"{span([o.rank for o in failing])} of {outcomes[0].size} raised "
            f"{type(first).__name__}: {first}",
            outcomes,
        )
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
    sign of a function written for the other rank-argument convention.

    Args:
        errors: what each rank raised, one per rank; empty is not "never called".
        tracebacks: each rank's traceback as text, in the same order, looked through for
            user frames when the error's own traceback object did not travel (other processes).
    """
    return bool(errors) and all(
        type(error) is TypeError and _BINDING.match(str(error)) and not has_user_frames(error, text)
        for error, text in zip(errors, tracebacks)
    )


class InconsistentOutcomeError(XlasimError):
    """Some ranks skipped or xfailed and others did not: the test has no single outcome."""


outcomes_key = pytest.StashKey[list[RankOutcome]]()


def results(outcomes: Sequence[RankOutcome]) -> list[Any]:
    """The per-rank results, or `RanksFailed` when any rank raised."""
    if any(o.raised for o in outcomes):
        raise RanksFailed(outcomes)
    return [o.result for o in outcomes]


def settle(outcomes: Sequence[RankOutcome]) -> None:
    """Return when every rank passed; otherwise raise the one exception that is the test outcome.

    A real failure wins over everything and is raised as the lowest failing rank's own exception
    (so `xfail(raises=...)` and `pytest.raises` around a world behave as for one process).
    """
    failing = [o for o in outcomes if failed(o)]
    if failing:
        raise failing[0].error  # type: ignore[misc]
    left = [o for o in outcomes if o.raised]
    if not left:
        return
    kinds = {type(o.error) for o in left}
    if len(left) == len(outcomes) and len(kinds) == 1:
        error = left[0].error
        if isinstance(error, Skipped) and error.__traceback__ is None:
            error._use_item_location = True  # its frames stayed where the rank ran
        raise error  # type: ignore[misc]
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
        if failed(o):
            continue
        for text, stream in ((o.stdout, sys.stdout), (o.stderr, sys.stderr)):
            if text:
                stream.write("".join(f"[{o.label}] {line}" for line in text.splitlines(True)))
                if not text.endswith("\n"):
                    stream.write("\n")
