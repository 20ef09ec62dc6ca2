"""Which rank the current thread is, if any.

Every emulated rank is a thread; this thread-local record is how patched torch_xla functions
know whose call they are serving. Threads that are not ranks (the main thread, data-loader
threads) have no context, with one exception: autograd runs the backward pass of XLA tensors on
its own per-device threads, created by C++ (Python sees them as dummy threads), and a collective
in a backward pass (torch_xla.core.functions, SyncBatchNorm) must still act for its rank. Such a
thread acts for the rank whose device is its default device.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .errors import OutsideWorldError
from .public import public
from .topology import Topology


class RankRun(Protocol):
    """What a rank's context holds of the launch it belongs to (`xlasim.emulation.rendezvous.Run`,
    a layer above: base names the shape it hands on, not the class): the launch's size and
    slice, and the meeting place the emulated collectives use (`call` is the emulation's
    `Call`, `channel` a key the sender and receiver agree on)."""

    size: int
    topology: Topology

    def gather(
        self,
        rank: int,
        participants: Sequence[int],
        call: Any,
        payload: Any,
        combine: Callable[[list[Any]], Any] | None = None,
    ) -> Any:
        """Wait for every participant of a collective; return what `combine` made of their
        payloads, the same object to each.

        Args:
            rank: the calling rank, global in the launch.
            participants: the ranks of the collective's group, the caller among them.
            call: what the caller asked for; the participants' calls must match.
            payload: the caller's contribution (host copies of its tensors).
            combine: makes the result from the payloads in participant order, once for all;
                None: the result is that list itself.
        """

    def send(self, rank: int, channel: Any, call: Any, payload: Any) -> None:
        """Post a message on `channel` and return at once (`xm.send`).

        Args:
            rank: the sending rank.
            channel: the mailbox's key (`("xm", channel_id)` for `xm.send`).
            call: what the sender asked for (op and location); the receiver gets it with the message.
            payload: the message (host copies of the tensors sent).
        """

    def receive(self, rank: int, channel: Any, call: Any) -> tuple[Any, Any]:
        """Take the oldest message of `channel`, waiting (bounded) until one is there; the
        sender's call and its payload.

        Args:
            rank: the receiving rank.
            channel: the mailbox's key, as the sender gave it.
            call: what the receiver asked for, named in a hang's report while it waits.
        """

    def store(self) -> Any: ...

    def per_rank(self, rank: int, key: Any, factory: Callable[[], Any]) -> Any:
        """An object private to one rank for the launch, made on its first use (what a TPU
        process keeps in its globals: torch.distributed's registry of groups).

        Args:
            rank: the rank it belongs to.
            key: names the object among the rank's others (`"dist"`).
            factory: makes it, called once per rank and key.
        """


_local = threading.local()


@public
@dataclass(frozen=True)
class RankContext:
    """One rank's view of the run it belongs to."""

    run: RankRun
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


_by_device: dict[str, RankContext] = {}
_by_device_lock = threading.Lock()


def current() -> RankContext | None:
    """The calling thread's rank context, or None outside a world."""
    context = getattr(_local, "context", None)
    if context is None and isinstance(threading.current_thread(), threading._DummyThread):
        return _serving_device()
    return context


def _serving_device() -> RankContext | None:
    import torch_xla

    with _by_device_lock:
        return _by_device.get(str(torch_xla._XLAC._xla_get_default_device()))


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
    """Make the calling thread the given rank (or no rank), and its device the rank's."""
    previous = getattr(_local, "context", None)
    _local.context = context
    with _by_device_lock:
        if previous is not None:
            _by_device.pop(previous.device, None)
        if context is not None:
            _by_device[context.device] = context
