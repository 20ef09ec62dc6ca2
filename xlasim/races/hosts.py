"""A file one host wrote and another could not find: the missing-file error says who wrote it.

On a pod every host has its own file system, and so does every emulated host here (its own
working directory), so a rank that reads a checkpoint another host wrote fails with
`FileNotFoundError`, as it would on the TPU. That error stays; with detection on, it gains a
note naming the rank, host and line that wrote the file under the same name.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .accesses import RENAME_TO, WRITE, Access

if TYPE_CHECKING:
    from ..reports.rank_outcome import RankOutcome


def explain_missing_files(outcomes: Sequence[RankOutcome]) -> None:
    """Add the writer on another host to every rank's `FileNotFoundError` (in place).

    Args:
        outcomes: the ranks' outcomes, with their accesses.
    """
    writes = [a for o in outcomes for a in (o.accesses or ()) if a.op in (WRITE, RENAME_TO)]
    for outcome in outcomes:
        missing = _missing(outcome)
        if missing is None:
            continue
        writers = [w for w in writes if w.on_host == missing.on_host and w.host != missing.host]
        if not writers:
            continue
        writer = writers[0]
        note = (
            f"xlasim: rank {writer.rank} wrote {missing.on_host} on host {writer.host} "
            f"(at {writer.site}); rank {outcome.rank} runs on host {missing.host}, and hosts "
            "of a pod do not share files: write it to a shared file system, or have each host "
            "write its own copy"
        )
        outcome.error.add_note(note)  # type: ignore[union-attr]
        outcome.traceback += note + "\n"


def _missing(outcome: RankOutcome) -> Access | None:
    """The access of `outcome`'s rank that found no file, when that is how it failed."""
    error = outcome.error
    if not isinstance(error, FileNotFoundError) or not error.filename or not outcome.accesses:
        return None
    name = os.path.normpath(os.fsdecode(error.filename))
    for access in reversed(outcome.accesses):
        if access.path.endswith(name.lstrip(os.sep)) or access.path == name:
            return access
    return None
