"""Collective payloads between processes: big tensors travel through shared memory.

A message is a pickle in which every tensor of at least `INLINE_BYTES` is replaced by a
reference into one shared-memory block (an anonymous `memfd`, passed as a file descriptor over
the Unix socket the message travels on). The receiver maps the block and gets tensors that are
views of it: one copy in (the sender writes its tensors into the block), none out. A tensor
that is already a view of a block the receiver knows (a result handed on) is not copied again.

Smaller tensors travel inline, as raw bytes (torch's own pickling of tensors goes through
`torch.save`, which costs far more than the bytes for small payloads).

Blocks are reference counted by the kernel: a block lives while any process maps it or holds
its descriptor, so nothing is left behind when a process dies, and there is no name to unlink.
"""

from __future__ import annotations

import io
import mmap
import os
import pickle
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing import reduction
from multiprocessing.connection import Connection
from typing import Any

import torch

#: Tensors smaller than this travel inside the pickle.
INLINE_BYTES = 64 * 1024
#: Tensors in a block start on cache-line boundaries, as XLA's DLPack import requires.
ALIGNMENT = 64


class Block:
    """A shared-memory block: an anonymous file mapped into this process."""

    def __init__(self, fd: int, size: int):
        self.fd = fd
        self.size = size
        self.map = mmap.mmap(fd, max(size, 1))
        self._bytes = torch.frombuffer(self.map, dtype=torch.uint8) if size else None

    @classmethod
    def create(cls, size: int) -> Block:
        fd = os.memfd_create("xlasim-payload", os.MFD_CLOEXEC)
        os.ftruncate(fd, max(size, 1))
        return cls(fd, size)

    def tensor(self, offset: int, dtype: torch.dtype, shape: Sequence[int]) -> torch.Tensor:
        """A tensor viewing `[offset, offset + nbytes)` of the block (it keeps the map alive).

        Args:
            offset: where the tensor starts in the block, in bytes (`ALIGNMENT`-aligned).
            dtype: its element type.
            shape: its shape; the view is contiguous.
        """
        count = _numel(shape) * _itemsize(dtype)
        assert self._bytes is not None
        return self._bytes[offset : offset + count].view(dtype).reshape(tuple(shape))

    def close_fd(self) -> None:
        """Drop the descriptor; the mapping (and the tensors viewing it) stay valid."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _numel(shape: Sequence[int]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _aligned(offset: int) -> int:
    return -(-offset // ALIGNMENT) * ALIGNMENT


@dataclass
class Message:
    """An encoded payload: the pickle, where its big tensors sit in the block, and the block."""

    data: bytes
    offsets: list[int] = field(default_factory=list)
    block: Block | None = None
    #: The sender's arena generation when the block is an arena's (receivers map it once).
    generation: int | None = None
    #: Senders that share one encoded message (a result every participant receives) count
    #: down here; the block's descriptor is closed by the last one.
    _users: int = 1
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def share(self, users: int) -> Message:
        self._users = users
        return self

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            last = self._users <= 0
        if last and self.block is not None and self.generation is None:
            self.block.close_fd()


# ------------------------------------------------------------------------------ encoding


class _Encoder(pickle.Pickler):
    """Pickles a payload, setting aside the tensors that go to the block."""

    def __init__(self, file: io.BytesIO):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.big: list[torch.Tensor] = []

    def persistent_id(self, obj: Any) -> Any:
        if not isinstance(obj, torch.Tensor) or obj.device.type != "cpu":
            return None
        obj = obj.detach()
        nbytes = obj.numel() * obj.element_size()
        if nbytes < INLINE_BYTES:
            raw = obj.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
            return ("inline", raw, obj.dtype, tuple(obj.shape))
        self.big.append(obj)
        return ("block", len(self.big) - 1, obj.dtype, tuple(obj.shape))


def encode(payload: Any, arena: Arena | None = None) -> Message:
    """Encode `payload`; big tensors are copied into `arena`'s block (reused from call to call:
    valid until the arena's next encode) or, without an arena, into a new block.

    Args:
        payload: what to send: any picklable object; its CPU tensors are set aside (inline
            below `INLINE_BYTES`, in the block from there).
        arena: the sender's reusable block, for a payload the receiver is done with before the
            sender's next call; None: a block of its own, for one that must outlive it.
    """
    buffer = io.BytesIO()
    encoder = _Encoder(buffer)
    encoder.dump(payload)
    if not encoder.big:
        return Message(buffer.getvalue())
    offsets, end = [], 0
    for tensor in encoder.big:
        start = _aligned(end)
        offsets.append(start)
        end = start + tensor.numel() * tensor.element_size()
    block = arena.reserve(end) if arena is not None else Block.create(end)
    for tensor, offset in zip(encoder.big, offsets):
        block.tensor(offset, tensor.dtype, tensor.shape).copy_(tensor)
    generation = arena.generation if arena is not None else None
    return Message(buffer.getvalue(), offsets, block, generation)


class _Decoder(pickle.Unpickler):
    def __init__(self, data: bytes, offsets: list[int], block: Block | None):
        super().__init__(io.BytesIO(data))
        self._offsets = offsets
        self._block = block

    def persistent_load(self, pid: Any) -> Any:
        kind, value, dtype, shape = pid
        if kind == "inline":
            if not value:
                return torch.empty(shape, dtype=dtype)
            return torch.frombuffer(bytearray(value), dtype=torch.uint8).view(dtype).reshape(shape)
        assert self._block is not None
        return self._block.tensor(self._offsets[value], dtype, shape)


class Arena:
    """A sender's reusable block: one collective in flight per rank, so one block suffices,
    grown when a payload does not fit. Receivers map each generation once."""

    def __init__(self) -> None:
        self.block: Block | None = None
        self.generation = 0

    def reserve(self, size: int) -> Block:
        if self.block is None or self.block.size < size:
            grown = max(size, 2 * self.block.size) if self.block is not None else size
            if self.block is not None:
                self.block.close_fd()
            self.block = Block.create(grown)
            self.generation += 1
        return self.block


# ------------------------------------------------------------------------------ the wire


class Receiver:
    """The receiving end of one sender: maps the blocks it passes, remembers its arena."""

    def __init__(self) -> None:
        self._arena: tuple[int, Block] | None = None

    def receive(self, connection: Connection) -> tuple[Any, Any]:
        """The next header and its decoded payload."""
        header, data, offsets, size, generation, fd_follows = connection.recv()
        block = None
        if fd_follows:
            with _socket_of(connection) as sock:
                (fd,) = reduction.recvfds(sock, 1)
            block = Block(fd, size)
            block.close_fd()
            if generation is not None:
                self._arena = (generation, block)
        elif generation is not None:
            assert self._arena is not None and self._arena[0] == generation
            block = self._arena[1]
        return header, None if data is None else _Decoder(data, offsets, block).load()


class Sender:
    """The sending end towards one receiver: passes each block's descriptor once."""

    def __init__(self) -> None:
        self._arena_sent: int | None = None

    def send(self, connection: Connection, header: Any, message: Message | None) -> None:
        """Send a header and an encoded payload, with the block's descriptor when the receiver
        has not mapped that block yet.

        Args:
            connection: the Unix socket connection to the receiver (descriptors pass on it).
            header: what the message is, pickled as is: a rank's request to the launching
                process, or its answer's status.
            message: the encoded payload (`encode`); None when there is none.
        """
        block = message.block if message is not None else None
        generation = message.generation if message is not None else None
        fd_follows = block is not None and (generation is None or generation != self._arena_sent)
        connection.send(
            (
                header,
                None if message is None else message.data,
                [] if message is None else message.offsets,
                block.size if block is not None else 0,
                generation,
                fd_follows,
            )
        )
        if fd_follows:
            assert block is not None
            with _socket_of(connection) as sock:
                reduction.sendfds(sock, [block.fd])
            if generation is not None:
                self._arena_sent = generation


def _socket_of(connection: Connection) -> socket.socket:
    return socket.socket(fileno=os.dup(connection.fileno()))
