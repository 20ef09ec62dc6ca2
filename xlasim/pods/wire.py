"""What one machine sends another at a collective: its ranks' calls and payloads, as bytes that
are never unpickled.

A message is an 8-byte length, a JSON header (per rank: the call's op, its signature as text,
where it was called, and the payload's layout) and the payloads' raw bytes. A payload is a
list of tensors of the dtypes below, or plain bytes (`xm.rendezvous`); anything else is refused
before it leaves the machine. The receiver reads only JSON and raw buffers, and rebuilds
tensors from a dtype named in a fixed table, so a peer can send wrong numbers but never code.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import torch

from ..base.errors import XlasimError

#: The dtypes a payload may hold, by the name the header carries.
DTYPES: dict[str, torch.dtype] = {
    str(dtype).removeprefix("torch."): dtype
    for dtype in (
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.complex64,
        torch.complex128,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
    )
}
_LENGTH = 8


@dataclass(frozen=True)
class MachineCall:
    """A rank's call as machines compare it: by `op` and `signature` text; `machine` runs it."""

    op: str
    signature: str
    location: str
    machine: int

    @classmethod
    def of(cls, call: Any, machine: int) -> MachineCall:
        """A call of this machine's rank (`emulation.rendezvous.Call`).

        Args:
            call: the rank's call as the rendezvous recorded it.
            machine: the machine rank the call was made on.
        """
        return cls(call.op, signature_text(call.signature), call.location, machine)

    def describe(self) -> str:
        return f"{self.op}({self.signature}) at {self.location} (on machine {self.machine})"


def signature_text(signature: tuple[tuple[str, Any], ...]) -> str:
    """A call's signature as text, the form in which machines compare them."""
    return ", ".join(f"{name}={value}" for name, value in signature)


def encode(arrivals: dict[int, tuple[Any, Any]]) -> bytes:
    """This machine's ranks' `(call, payload)` at one collective, as a message."""
    entries, buffers = [], []
    for rank, (call, payload) in sorted(arrivals.items()):
        entry = {
            "rank": rank,
            "op": call.op,
            "signature": signature_text(call.signature),
            "location": call.location,
        }
        if isinstance(payload, bytes):
            entry["bytes"] = len(payload)
            buffers.append(payload)
        elif isinstance(payload, (list, tuple)) and all(
            isinstance(t, torch.Tensor) for t in payload
        ):
            entry["tensors"] = [tensor_layout(t, f"rank {rank}'s") for t in payload]
            buffers += [tensor_bytes(t) for t in payload]
        else:
            raise XlasimError(
                f"rank {rank}'s {call.op} payload ({type(payload).__name__}) cannot cross "
                "machines: only tensors and bytes do"
            )
        entries.append(entry)
    return frame(entries, buffers)


def frame(header: Any, buffers: list[bytes]) -> bytes:
    """A message: the 8-byte length of the JSON `header`, the header, then the raw buffers.

    Args:
        header: what describes the buffers, JSON-serializable.
        buffers: the raw bytes that follow it, in the order the header lists them.
    """
    text = json.dumps(header).encode()
    return b"".join([len(text).to_bytes(_LENGTH, "big"), text, *buffers])


def unframe(message: bytes) -> tuple[Any, memoryview, int]:
    """A message's JSON header, a view of the message, and the offset of its first buffer
    (raises ValueError, as `json` does, on a malformed one)."""
    length = int.from_bytes(message[:_LENGTH], "big")
    if len(message) < _LENGTH or length > len(message) - _LENGTH:
        raise ValueError(f"a header of {length} bytes in a message of {len(message)}")
    return json.loads(message[_LENGTH : _LENGTH + length]), memoryview(message), _LENGTH + length


def take(view: memoryview, offset: int, count: Any) -> tuple[memoryview, int]:
    """The `count` bytes of a message (`view`) at `offset`, and the offset after them; a count
    the header gives that is not a length within the message raises ValueError.

    Args:
        view: the whole message.
        offset: where the buffer starts.
        count: its length, as the sender's header gives it.
    """
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise ValueError(f"a buffer of {count!r} bytes")
    if offset + count > len(view):
        raise ValueError(f"a buffer of {count} bytes past the message's end ({len(view)} bytes)")
    return view[offset : offset + count], offset + count


def decode(message: bytes, machine: int) -> dict[int, tuple[MachineCall, Any]]:
    """Another machine's message as `{rank: (call, payload)}`; a malformed one is an error
    naming the machine.

    Args:
        message: the bytes as received (`frame`'s form).
        machine: the machine rank that sent it.
    """
    try:
        entries, view, offset = unframe(message)
        arrivals = {}
        for entry in entries:
            call = MachineCall(entry["op"], entry["signature"], entry["location"], machine)
            if "bytes" in entry:
                raw, offset = take(view, offset, entry["bytes"])
                payload: Any = bytes(raw)
            else:
                payload = []
                for layout in entry["tensors"]:
                    raw, offset = take(view, offset, layout["bytes"])
                    payload.append(tensor_from(raw, layout))
            arrivals[int(entry["rank"])] = (call, payload)
        if offset != len(message):
            raise ValueError(f"{len(message) - offset} bytes left over")
    except (ValueError, KeyError, TypeError, RuntimeError) as error:
        raise XlasimError(
            f"machine {machine} sent a malformed collective message: {error}"
        ) from None
    return arrivals


def tensor_layout(tensor: torch.Tensor, whose: str) -> dict[str, Any]:
    """What a receiver needs to rebuild `tensor` from its bytes.

    Args:
        tensor: a tensor to send.
        whose: whose tensor it is (a rank, a collective), as a refusal names it.
    """
    name = str(tensor.dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise XlasimError(f"{whose} {tensor.dtype} tensor cannot cross machines")
    return {"dtype": name, "shape": list(tensor.shape), "bytes": tensor.nbytes}


def tensor_bytes(tensor: torch.Tensor) -> bytes:
    """A tensor's elements as raw bytes, in row-major order."""
    flat = tensor.detach().contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def tensor_from(raw: memoryview, layout: dict[str, Any]) -> torch.Tensor:
    """The tensor of `layout` (`tensor_layout`) over a copy of `raw`; the dtype comes from the
    fixed table, so a peer's header can name nothing else, and the shape must hold exactly the
    bytes given (a shape alone never allocates: raises ValueError otherwise).

    Args:
        raw: the tensor's bytes within a received message.
        layout: the sender's description of it (dtype name, shape, byte count).
    """
    dtype = DTYPES[layout["dtype"]]
    shape = layout["shape"]
    if not isinstance(shape, list) or not all(
        isinstance(size, int) and not isinstance(size, bool) and size >= 0 for size in shape
    ):
        raise ValueError(f"a tensor of shape {shape!r}")
    needed = math.prod(shape) * dtype.itemsize
    if needed != raw.nbytes:
        raise ValueError(f"a {dtype} tensor of shape {shape} in {raw.nbytes} bytes, not {needed}")
    if not raw.nbytes:
        return torch.empty(shape, dtype=dtype)
    flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    return flat.view(dtype).reshape(shape)
