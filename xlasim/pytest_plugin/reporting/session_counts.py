"""The XLA counters a session's tests are measured by (`xla_metrics`): this process's own, plus
what ranks in other processes reported with their outcomes.

Each executor holds one (`Executor.counts`), made when the backend is chosen: the backend says
there whether this process's counters count (not on the native backend, whose pytest process
must not start an XLA runtime, which reading them would), and each run's remote growth is folded
in where the run's outcomes arrive. Held by the session's executor rather than in module
globals, so that nothing outside a session (another session in the same process, pytester's
inline runs) reads or changes its counts.
"""

from __future__ import annotations

from collections import Counter

from ...reports.xla_counters import COMPILED_GRAPHS, FALLBACK_PREFIX, counts


class SessionCounts:
    """Compiled graphs and CPU fallbacks of a session, over every process its ranks run in."""

    def __init__(self, *, this_process: bool) -> None:
        #: Whether this process's own counters count (its rank threads' work).
        self.this_process = this_process
        self._remote: Counter[str] = Counter()

    def add_remote(self, deltas: list[dict[str, int] | None]) -> None:
        """Fold one run's per-process counter growth in: compilations as the most any one
        process compiled (a graph every process compiles counts once, as on a slice),
        fallbacks summed over the ranks."""
        present = [Counter(d) for d in deltas if d]
        if not present:
            return
        self._remote[COMPILED_GRAPHS] += max(d[COMPILED_GRAPHS] for d in present)
        for delta in present:
            self._remote.update({k: v for k, v in delta.items() if k.startswith(FALLBACK_PREFIX)})

    def totals(self) -> Counter[str]:
        """This process's counters (when they count) plus what remote ranks reported."""
        total = counts() if self.this_process else Counter()
        total.update(self._remote)
        return total
