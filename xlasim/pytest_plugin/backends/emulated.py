"""The emulated backend: ranks are the warm ranks of `xlasim.world()`.

The core runs the function and returns every rank's outcome (`World.run_outcomes`), output
and failure rendering included; this backend only chooses what the ranks run. In the threads
mode they run the test's own function objects, and failures are rendered here, from their
frames. In a multi-process topology (`--xla-processes`, `--xla-hosts`, `--xla-topology`) they
live in the world's worker processes: the function and its arguments are pickled once
(`remote.pack`), each rank runs `rank_side.run_job`, which imports the test module from its
path in the worker, and renders its failure there (`rank_side.render_failure`); the XLA
counters each
worker process added come back on the outcomes and join the session's counts.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from ... import activation
from ...reports.rank_outcome import Collect, RankOutcome
from ..remote import jobs as remote
from ..remote import rank_side
from ..reporting.session_counts import SessionCounts


class EmulatedExecutor:
    """Runs ranks on the core's world; each run's stuck ranks are replaced by the core."""

    name = "emulated"
    sub_worlds = True

    def __init__(self) -> None:
        #: This process's counters hold the work of rank threads; worker processes report theirs.
        self.counts = SessionCounts(this_process=True)

    @property
    def size(self) -> int:
        return activation.topology().devices

    def describe(self) -> str:
        return activation.topology().describe()

    def start(self) -> None:
        activation.world()

    def run_ranks(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any],
        kwargs: dict[str, Any],
        *,
        size: int,
        timeout: float,
        tee: bool,
        style: remote.FailureStyle | None = None,
    ) -> list[RankOutcome]:
        """`Executor.run_ranks` on the core's world: rank threads here, or its worker processes
        (`--xla-processes`), which get the call pickled.

        Args:
            fn: the function every rank calls; pickled when the ranks are in worker processes.
            args: positional arguments, the same for every rank.
            kwargs: keyword arguments, the same for every rank.
            size: how many of the world's ranks take part (a sub-world may be smaller).
            timeout: seconds the run may take before the world reports it hung.
            tee: also write rank output live to this process's stdout/stderr.
            style: how failures render in worker processes; None renders as pytest's
                defaults would, paths relative to this directory. Unused for rank threads,
                whose failures pytest renders here.
        """
        topology = activation.topology()
        if topology.threaded:
            body, collect = fn, Collect(output=True, tee=tee, metrics=True)
        else:
            style = style or remote.FailureStyle.of(None)
            job = remote.pack(
                fn,
                args,
                kwargs,
                where=f"this session's ranks live in worker processes ({topology.describe()})",
                style=style,
            )
            body, args, kwargs = functools.partial(rank_side.run_job, job), (), {}
            render = functools.partial(rank_side.render_failure, style)
            collect = Collect(output=True, tee=tee, metrics=True, render=render)
        outcomes = activation.world().run_outcomes(
            body, args, kwargs, size=size, timeout=timeout, pass_rank=False, collect=collect
        )
        if not topology.threaded:  # this process's own counters hold the threads' work
            self.counts.add_remote([o.metrics for o in outcomes])
        return outcomes

    def close(self) -> None:
        """The core's world outlives the session's executor: nothing to release."""
