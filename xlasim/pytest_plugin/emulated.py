"""The emulated backend: ranks are the warm ranks of `xlasim.world()`.

In the default topology they are threads of this process and run the test's own function
objects, their output routed per rank. In a multi-process topology (`--xla-processes`,
`--xla-hosts`, `--xla-topology`) they live in the world's worker processes: the function and
its arguments are pickled once (`remote.pack`), each rank runs `remote.run_in_rank`, a
module-level callable that imports the test module from its path in the worker, and the
ranks' output, failure renderings and XLA counters come back through a per-run directory.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from .. import activation
from ..errors import RankFailedError
from . import metrics, remote
from .capture import per_rank_output
from .outcomes import RankOutcome


class EmulatedExecutor:
    """Runs ranks on the core's world; each run's stuck ranks are replaced by the core."""

    name = "emulated"
    sub_worlds = True

    def __init__(self) -> None:
        self._scratch: str | None = None

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
        if not activation.topology().threaded:
            return self._run_in_processes(
                fn, args, kwargs, size=size, timeout=timeout, tee=tee, style=style
            )
        outcomes = [RankOutcome(rank, size) for rank in range(size)]
        returned: set[int] = set()

        def body(rank: int) -> None:
            outcomes[rank].result = fn(*args, **kwargs)
            returned.add(rank)

        with per_rank_output(size, tee) as (out, err):
            try:
                activation.world().run(body, size=size, timeout=timeout)
            except RankFailedError as failure:
                for rank, error in failure.failures.items():
                    outcomes[rank].error = error
                    outcomes[rank].traceback = failure.tracebacks.get(rank, "")
            finally:
                for o in outcomes:
                    o.stdout, o.stderr = out[o.rank].getvalue(), err[o.rank].getvalue()
        for o in outcomes:
            o.released = o.error is None and o.rank not in returned
        return outcomes

    def _run_in_processes(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any],
        kwargs: dict[str, Any],
        *,
        size: int,
        timeout: float,
        tee: bool,
        style: remote.FailureStyle | None,
    ) -> list[RankOutcome]:
        topology = activation.topology()
        job = remote.pack(
            fn,
            args,
            kwargs,
            where=f"this session's ranks live in worker processes ({topology.describe()})",
            style=style or remote.FailureStyle.of(None),
            tee=tee,
        )
        if self._scratch is None:
            self._scratch = tempfile.mkdtemp(prefix="xlasim-pytest-")
        report_dir = tempfile.mkdtemp(prefix="run-", dir=self._scratch)
        body = functools.partial(remote.run_in_rank, job, report_dir)
        results: list[Any] = [None] * size
        failures: dict[int, BaseException] = {}
        tracebacks: dict[int, str] = {}
        try:
            results = activation.world().run(body, size=size, timeout=timeout, pass_rank=False)
        except RankFailedError as failure:
            failures, tracebacks = failure.failures, failure.tracebacks
        finally:  # a run-level failure (mismatch, hang) propagates; its counters still count
            reports = remote.read_reports(report_dir, size)
            shutil.rmtree(report_dir, ignore_errors=True)
            metrics.add_remote([report.get("metrics") for report in reports.values()])
        outcomes = []
        for rank in range(size):
            report = reports.get(rank, {})
            error = failures.get(rank)
            outcomes.append(
                RankOutcome(
                    rank,
                    size,
                    result=results[rank],
                    error=None if error is None else remote.rebuild_error(report, error),
                    traceback=report.get("traceback") or tracebacks.get(rank, ""),
                    local_frames=False,
                    repr=report.get("repr"),
                    stdout=report.get("stdout", ""),
                    stderr=report.get("stderr", ""),
                    released=bool(report.get("released")),
                )
            )
        return outcomes

    def close(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
