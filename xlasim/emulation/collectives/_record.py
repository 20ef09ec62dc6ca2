"""A collective's `CollectiveRecord`, which its module declares, and the shape rules they share."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..compile_dispatch import between_graphs, traced_as

Args = dict[str, Any]
Shape = Sequence[int]
#: Result shapes from input shapes and the op's arguments (the fake kernel, and placeholders).
ShapeRule = Callable[[list[Shape], Args], list[Shape]]
#: The emulated collective on this rank, on host copies of the op's inputs.
Kernel = Callable[[list[torch.Tensor], Args], list[torch.Tensor]]


@dataclass(frozen=True)
class CollectiveRecord:
    """One `xm` collective: everything the emulation knows of it, by its torch_xla name.

    Args:
        name: its `xm.<name>`, one of `base/collective_names.py`.
        eager: the emulated function, torch_xla's signature.
        combine: the arithmetic of its completed meeting, None when the meeting only hands
            payloads on (send, recv, rendezvous).
        traced: what dynamo traces in its place (a call of the op), None when it cuts the graph.
        shapes: the op's result shapes, with `traced`.
        kernel: the op's kernel, with `traced`; the op's arguments are the eager function's
            parameters by name (`traced_as` holds the twin to them), so it passes them on as is.
        xlac: the `torch_xla._XLAC` functions that build it in-graph (refused on ranks).
    """

    name: str
    eager: Callable[..., Any]
    combine: Callable[..., Any] | None
    traced: Callable[..., Any] | None = None
    shapes: ShapeRule | None = None
    kernel: Kernel | None = None
    xlac: tuple[str, ...] = ()

    @property
    def cuts_graph(self) -> bool:
        """Whether dynamo breaks the graph at it (it runs eagerly between graphs)."""
        return self.traced is None

    def xm_function(self) -> Callable[..., Any]:
        """The function installed as `xm.<name>`: the eager one, or its traced twin under dynamo."""
        if self.traced is None:
            return between_graphs(self.eager)
        return traced_as(self.traced)(self.eager)


def same_shapes(shapes: list[Shape], args: Args) -> list[Shape]:
    """The shape rule of a collective whose results have its inputs' shapes.

    Args:
        shapes: the inputs' shapes.
        args: the op's arguments (unused).
    """
    return shapes


def resized(shape: Shape, dim: int, factor: int, divisor: int = 1) -> list[int]:
    """`shape` with dimension `dim` multiplied by `factor`, then divided by `divisor`.

    Args:
        shape: the input's shape.
        dim: the dimension that changes (negative counts from the end).
        factor: what it is multiplied by.
        divisor: what it is then divided by.
    """
    sizes = list(shape)
    dim %= len(sizes)
    sizes[dim] = sizes[dim] * factor // divisor
    return sizes
