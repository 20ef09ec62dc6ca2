"""Which rank the current thread is, if any.

Every emulated rank is a thread; this thread-local record is how patched torch_xla functions
know whose call they are serving. Threads that are not ranks (the main thread, data-loader
threads) have no context.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import OutsideWorldError

if TYPE_CHECKING:
    from .run import Run

_local = threading.local()


@dataclass(frozen=True)
class RankContext:
    """One rank's view of the run it belongs to."""

    run: Run
    rank: int

    @property
    def world_size(self) -> int:
        return self.run.size

    @property
    def device(self) -> str:
        return self.run.topology.device_of(self.rank)

    @property
    def local_rank(self) -> int:
        """Rank within its host."""
        return self.run.topology.local_rank_of(self.rank)

    @property
    def process_index(self) -> int:
        return self.run.topology.process_of(self.rank)

    @property
    def process_count(self) -> int:
        """Processes taking part (a sub-world may use fewer than the slice has)."""
        return -(-self.world_size // self.run.topology.cores_per_process)

    @property
    def host_index(self) -> int:
        return self.run.topology.host_of(self.rank)

    @property
    def addressable_device_count(self) -> int:
        """Cores of this rank's process that take part."""
        per_process = self.run.topology.cores_per_process
        return min(per_process, self.world_size - self.process_index * per_process)

    @property
    def local_device_count(self) -> int:
        """Cores of this rank's host that take part."""
        per_host = self.run.topology.cores_per_host
        return min(per_host, self.world_size - self.host_index * per_host)

    @property
    def local_process_count(self) -> int:
        return -(-self.local_device_count // self.run.topology.cores_per_process)


def current() -> RankContext | None:
    """The calling thread's rank context, or None outside a world."""
    return getattr(_local, "context", None)


def require(api: str) -> RankContext:
    """The calling thread's rank context; a clear error when there is none."""
    context = current()
    if context is None:
        raise OutsideWorldError(
            f"{api} was called outside an emulated world: collectives only make sense on a rank. "
            "Run the code through xmp.spawn(fn), torch_xla.launch(fn), a @pytest.mark.xla test "
            "or the xla_world fixture."
        )
    return context


def bind(context: RankContext | None) -> None:
    """Make the calling thread the given rank (or no rank)."""
    _local.context = context
