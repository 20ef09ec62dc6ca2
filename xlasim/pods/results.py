"""What a launch's ranks returned, passed between the machines of a pod once it ends.

A launch on a pod runs each rank on one machine, but its caller runs on every machine: a test's
`xla_world.run` compares every rank's result on each machine, as it does on one. So when a launch
ends well, each machine sends the others its ranks' results (`MachineRanks.finished`), and every
machine's outcomes hold every rank's result.

Results cross as a JSON tree and raw buffers (`wire.frame`), never pickled: None, booleans,
numbers, text, tensors and NumPy arrays of `wire.DTYPES`, bytes, and lists, tuples and dicts of
these. Anything else stays on its machine; the others get an `UnsentResult` saying so, which a
caller that never looks at it (a script's `xmp.spawn`) does not notice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..base.errors import XlasimError
from . import wire

_SCALARS = (type(None), bool, int, float, str)


@dataclass(frozen=True)
class UnsentResult:
    """A rank's result that could not cross machines: its type, and where it stayed."""

    rank: int
    type_name: str
    machine: int

    def __repr__(self) -> str:
        return (
            f"<rank {self.rank}'s result, a {self.type_name}, stayed on machine {self.machine}: "
            "only None, numbers, text, bytes, tensors, NumPy arrays and lists, tuples and dicts "
            "of them cross machines>"
        )


def encode(results: dict[int, Any]) -> bytes:
    """This machine's ranks' results, `{rank: result}`, as a message."""
    buffers: list[bytes] = []
    tree = {str(rank): _tree(result, buffers) for rank, result in results.items()}
    return wire.frame(tree, buffers)


def decode(message: bytes, machine: int) -> dict[int, Any]:
    """Another machine's results message as `{rank: result}`; a malformed one is an error
    naming the machine.

    Args:
        message: what `encode` made on machine `machine`.
        machine: the sender, for errors and `UnsentResult`.
    """
    try:
        tree, view, offset = wire.unframe(message)
        reader = _Reader(view, offset, machine)
        results = {int(rank): reader.value(int(rank), node) for rank, node in tree.items()}
        if reader.offset != len(message):
            raise ValueError(f"{len(message) - reader.offset} bytes left over")
    except (ValueError, KeyError, TypeError, RuntimeError, AttributeError) as error:
        raise XlasimError(f"machine {machine} sent malformed rank results: {error}") from None
    return results


def _tree(value: Any, buffers: list[bytes]) -> Any:
    if isinstance(value, _SCALARS):
        return {"scalar": value}
    if isinstance(value, torch.Tensor) and str(value.dtype).removeprefix("torch.") in wire.DTYPES:
        tensor = value.detach().cpu()
        buffers.append(wire.tensor_bytes(tensor))
        return {"tensor": wire.tensor_layout(tensor, "a result's")}
    if isinstance(value, np.ndarray) and value.dtype != object:
        return {"array": _tree(torch.from_numpy(np.ascontiguousarray(value)), buffers)}
    if isinstance(value, bytes):
        buffers.append(value)
        return {"bytes": len(value)}
    if isinstance(value, (list, tuple)):
        kind = "list" if isinstance(value, list) else "tuple"
        return {kind: [_tree(item, buffers) for item in value]}
    if isinstance(value, dict) and all(isinstance(key, (str, int)) for key in value):
        return {"dict": [[key, _tree(item, buffers)] for key, item in value.items()]}
    return {"kept": type(value).__qualname__}


class _Reader:
    """Rebuilds results from a message's tree, taking its buffers in order."""

    def __init__(self, view: memoryview, offset: int, machine: int):
        self.view, self.offset, self.machine = view, offset, machine

    def value(self, rank: int, node: dict[str, Any]) -> Any:
        (kind, content), *rest = node.items()
        if rest:
            raise ValueError(f"a node of kinds {list(node)}")
        if kind == "scalar" and isinstance(content, _SCALARS):
            return content
        if kind == "tensor":
            return wire.tensor_from(self._take(content["bytes"]), content)
        if kind == "array":
            return self.value(rank, content).numpy()
        if kind == "bytes":
            return bytes(self._take(content))
        if kind in ("list", "tuple"):
            items = [self.value(rank, item) for item in content]
            return items if kind == "list" else tuple(items)
        if kind == "dict":
            return {key: self.value(rank, item) for key, item in content}
        if kind == "kept":
            return UnsentResult(rank, str(content), self.machine)
        raise ValueError(f"an unknown node {kind!r}")

    def _take(self, count: Any) -> memoryview:
        taken, self.offset = wire.take(self.view, self.offset, count)
        return taken
