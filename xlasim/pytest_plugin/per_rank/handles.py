"""What tests hold of the ranks: a rank's view (`XlaRank`, filled in on each rank for the
`RankPlaceholder` the `xla_rank` fixture gives) and the parent's handle (`XlaWorld`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from ...base.rank_context import current
from ..options.settings import resolve
from ..reporting.outcomes import WORLD_RUN_CONVENTION, RanksFailed, never_called, results
from ..session import executor, run_ranks

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class XlaRank:
    """One rank's view of the world it runs in."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @classmethod
    def current(cls) -> XlaRank:
        """The calling rank: from the emulated context, or the real runtime in a native worker."""
        import torch

        ctx = current()
        if ctx is not None:
            return cls(ctx.rank, ctx.world_size, ctx.local_rank, torch.device(ctx.device))
        import torch_xla
        import torch_xla.runtime as xr

        return cls(xr.global_ordinal(), xr.world_size(), xr.local_ordinal(), torch_xla.device())


class RankPlaceholder:
    """What `xla_rank` is outside the ranks; each rank swaps it for its own `XlaRank`."""

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"xla_rank.{name} was read outside a rank: fixtures are resolved once in the parent "
            "process and handed to every rank, so only the test body of a @pytest.mark.xla test "
            "sees a rank's view (read it there, or use xlasim.current() / xr.global_ordinal())"
        )

    def __repr__(self) -> str:
        return "<xla_rank: filled in on each rank>"


class XlaWorld:
    """Parent-side handle on the session's ranks: `run(fn, *args, **kwargs)` on every rank."""

    def __init__(self, config: pytest.Config):
        self._config = config
        #: Bound on each run; set from the current test's marker before it runs.
        self.timeout = resolve(config).timeout
        #: The running test (failures in ranks of other processes are rendered as it would).
        self.item: pytest.Item | None = None

    @property
    def size(self) -> int:
        """How many ranks (cores) the session has."""
        return executor(self._config).size

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
        """Call `fn(*args, **kwargs)` on every rank; return the per-rank results in rank order.

        `fn` gets no rank argument: it asks `xr.global_ordinal()` or `xlasim.current()`.
        Raises `xlasim.RankFailedError` (naming each failing rank) when ranks raise. When the
        ranks live in other processes, `fn` and the arguments are pickled to them (a lambda is
        an `xlasim.XlasimError` saying so) and the results pickled back.

        Args:
            fn: what every rank calls, with no rank argument.
            args: positional arguments, the same for every rank.
            kwargs: keyword arguments, the same for every rank.
        """
        return self.run_on(self.size, fn, *args, **kwargs)

    def run_on(self, size: int, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
        """`run` on a sub-world of the first `size` ranks.

        Args:
            size: how many ranks take part, 1 up to the session's size; more skips the test.
            fn: what each of those ranks calls, with no rank argument.
            args: positional arguments, the same for every rank.
            kwargs: keyword arguments, the same for every rank.
        """
        if not 1 <= size <= self.size:
            pytest.skip(f"needs {size} XLA cores, this session has {self.size} (--xla-devices)")
        outcomes = run_ranks(
            self._config, fn, args, kwargs, size=size, timeout=self.timeout, item=self.item
        )
        try:
            return results(outcomes)
        except RanksFailed as failure:
            if all(o.error is not None for o in outcomes) and never_called(
                [o.error for o in outcomes], [o.traceback for o in outcomes]
            ):
                failure.hint = WORLD_RUN_CONVENTION
            raise

    def __repr__(self) -> str:
        return f"<xla_world of {self.size} ranks>"


world_key = pytest.StashKey[XlaWorld]()


def world_handle(config: pytest.Config) -> XlaWorld:
    if world_key not in config.stash:
        config.stash[world_key] = XlaWorld(config)
    return config.stash[world_key]
