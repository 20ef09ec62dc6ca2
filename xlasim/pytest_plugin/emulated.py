"""The emulated backend: ranks are the warm threads of `xlasim.world()` in this process."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .. import activation
from ..errors import RankFailedError
from .capture import per_rank_output
from .outcomes import RankOutcome


class EmulatedExecutor:
    """Runs ranks on the core's world; each run's stuck threads are replaced by the core."""

    name = "emulated"
    sub_worlds = True

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
    ) -> list[RankOutcome]:
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
