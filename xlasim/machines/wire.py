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
        """A call of this machine's rank (`emulation.rendezvous.Call`)."""
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
            entry["tensors"] = [_layout(rank, t) for t in payload]
            buffers += [_raw(t) for t in payload]
        else:
            raise XlasimError(
                f"rank {rank}'s {call.op} payload ({type(payload).__name__}) cannot cross "
                "machines: only tensors and bytes do"
            )
        entries.append(entry)
    header = json.dumps(entries).encode()
    return b"".join([len(header).to_bytes(_LENGTH, "big"), header, *buffers])


def decode(message: bytes, machine: int) -> dict[int, tuple[MachineCall, Any]]:
    """Another machine's message as `{rank: (call, payload)}`; a malformed one is an error
    naming the machine."""
    try:
        length = int.from_bytes(message[:_LENGTH], "big")
        entries = json.loads(message[_LENGTH : _LENGTH + length])
        view = memoryview(message)
        offset = _LENGTH + length
        arrivals = {}
        for entry in entries:
            call = MachineCall(entry["op"], entry["signature"], entry["location"], machine)
            if "bytes" in entry:
                payload: Any = bytes(view[offset : offset + entry["bytes"]])
                offset += entry["bytes"]
            else:
                payload = []
                for layout in entry["tensors"]:
                    payload.append(_tensor(view[offset : offset + layout["bytes"]], layout))
                    offset += layout["bytes"]
            arrivals[int(entry["rank"])] = (call, payload)
        if offset != len(message):
            raise ValueError(f"{len(message) - offset} bytes left over")
    except (ValueError, KeyError, TypeError, RuntimeError) as error:
        raise XlasimError(
            f"machine {machine} sent a malformed collective message: {error}"
        ) from None
    return arrivals


def _layout(rank: int, tensor: torch.Tensor) -> dict[str, Any]:
    name = str(tensor.dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise XlasimError(f"rank {rank}'s {tensor.dtype} tensor cannot cross machines")
    return {"dtype": name, "shape": list(tensor.shape), "bytes": tensor.nbytes}


def _raw(tensor: torch.Tensor) -> bytes:
    flat = tensor.detach().contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def _tensor(raw: memoryview, layout: dict[str, Any]) -> torch.Tensor:
    dtype = DTYPES[layout["dtype"]]
    shape = [int(size) for size in layout["shape"]]
    if not raw.nbytes:
        return torch.empty(shape, dtype=dtype)
    flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    return flat.view(dtype).reshape(shape)
