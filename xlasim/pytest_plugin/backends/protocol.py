"""The one interface the plugin runs ranks through, whichever backend plays them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ...reports.rank_outcome import RankOutcome
from ..remote.jobs import FailureStyle
from ..reporting.session_counts import SessionCounts


class Executor(Protocol):
    """Runs a function on the first `size` ranks and reports how each rank ended."""

    #: "emulated" or "native".
    name: str
    #: Whether a run may use fewer ranks than the session has (`devices=N` below the size).
    sub_worlds: bool
    #: The session's XLA counters, including what ranks in other processes reported.
    counts: SessionCounts

    @property
    def size(self) -> int:
        """How many ranks (cores) this session has."""

    def describe(self) -> str:
        """The topology, for the report header."""

    def start(self) -> None:
        """Get the ranks ready before the first test (workers, threads)."""

    def close(self) -> None:
        """Release what the executor holds (workers, scratch directories) at the session end."""

    def run_ranks(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any],
        kwargs: dict[str, Any],
        *,
        size: int,
        timeout: float,
        tee: bool,
        style: FailureStyle | None = None,
    ) -> list[RankOutcome]:
        """Call `fn(*args, **kwargs)` on ranks 0..size-1.

        Rank failures come back in the outcomes; a run-level failure (collective mismatch,
        deadlock, timeout) raises an `xlasim.XlasimError` describing every rank.

        Args:
            fn: the test body or `xla_world.run` function every rank calls; it must pickle
                when the ranks live in other processes.
            args: positional arguments, the same for every rank.
            kwargs: keyword arguments (resolved fixture values), the same for every rank.
            size: how many ranks take part, 1 up to `self.size` (only `self.size` when
                `sub_worlds` is False).
            timeout: seconds the whole run may take before it fails as hung.
            tee: also write rank output to this process's stdout/stderr, not only capture it.
            style: how the current test renders failures (ranks in other processes render
                theirs where they ran); None renders as a session without a test would.
        """
