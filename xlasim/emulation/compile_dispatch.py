"""Emulated `xm` collectives under `torch.compile`: what dynamo traces in their place.

Dynamo cannot trace the emulation (rank threads, locks, frame inspection), so when it traces an
`xm` collective the collective becomes one opaque op, `xlasim::collective(Tensor[] tensors,
str request) -> Tensor[]` (defined, with its kernels, in `compiled.py`), and collectives that
cannot be graph nodes (send, recv, rendezvous) break the graph, as torch_xla's do on a TPU. Each
collective's record (its module in `collectives/`) says which, and holds its traced twin; this
module is the machinery they share (`traced_as`, `between_graphs`, the op's call).
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

NAMESPACE = "xlasim"
Args = dict[str, Any]
F = TypeVar("F", bound=Callable[..., Any])


def traced_as(traced: Callable[..., Any]) -> Callable[[F], F]:
    """Run the decorated `xm` collective as `traced` when dynamo traces its call (a node of the
    op in the graph), as itself otherwise.

    Args:
        traced: the traced form; it takes some of the collective's parameters, by the same
            names and in the same order, each given as the caller gave it or defaulted.
    """

    def decorate(eager: F) -> F:
        code = eager.__code__
        names = code.co_varnames[: code.co_argcount]
        given_defaults = eager.__defaults__ or ()
        defaults = dict(zip(names[len(names) - len(given_defaults) :], given_defaults))
        wanted = traced.__code__.co_varnames[: traced.__code__.co_argcount]
        if [n for n in names if n in wanted] != list(wanted):
            raise TypeError(f"{traced.__name__} must take parameters of {eager.__name__}: {wanted}")

        @functools.wraps(eager)
        def dispatch(*args: Any, **kwargs: Any) -> Any:
            if not torch.compiler.is_compiling():
                return eager(*args, **kwargs)
            given = {**defaults, **dict(zip(names, args)), **kwargs}
            return traced(*[given[name] for name in wanted])

        dispatch.__signature__ = inspect.signature(eager)  # type: ignore[attr-defined]
        return dispatch  # type: ignore[return-value]

    return decorate


def between_graphs(eager: F) -> F:
    """Run the decorated `xm` collective eagerly when dynamo traces its call: the graph breaks
    there, as it does at torch_xla's own version on a TPU (refused, with this reason, under
    fullgraph=True)."""
    disabled = torch.compiler.disable(
        eager,
        reason=f"xm.{eager.__name__} cannot be a node of a compiled graph (nor can torch_xla's on "
        "a TPU): it runs eagerly between graphs; compile without fullgraph=True, or call it outside",
    )

    @functools.wraps(eager)
    def dispatch(*args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():
            return disabled(*args, **kwargs)
        return eager(*args, **kwargs)

    dispatch.__signature__ = inspect.signature(eager)  # type: ignore[attr-defined]
    return dispatch  # type: ignore[return-value]


# ------------------------------------------------------------------------------ the op


@torch.compiler.assume_constant_result
def request(op: str, args: Args) -> str:
    """The op's `request` argument; a constant of the traced graph (dynamo calls this once).

    Args:
        op: the collective's name.
        args: its arguments, JSON-able.
    """
    return json.dumps([op, args])


def call(op: str, tensors: list[torch.Tensor], **args: Any) -> list[torch.Tensor]:
    """Run emulated collective `op` (an `xm` function name) through the op: in a graph when
    traced, else now.

    Args:
        op: the collective's name.
        tensors: its tensor inputs.
        args: its other arguments, JSON-able.
    """
    return torch.ops.xlasim.collective(tensors, request(op, args))


# ------------------------------------------------------------------------------ the traced twins' helpers

Tensors = torch.Tensor | list[torch.Tensor]


def tensor_list(value: Tensors) -> tuple[list[torch.Tensor], bool]:
    """`value` as a list, and whether it was one tensor."""
    return ([value], True) if isinstance(value, torch.Tensor) else (list(value), False)


def copy_into(targets: Sequence[torch.Tensor], values: Sequence[torch.Tensor]) -> None:
    """Write a traced collective's results into the caller's tensors (its in-place forms).

    Args:
        targets: the caller's tensors.
        values: the results, one per target.
    """
    with torch.no_grad():
        for target, value in zip(targets, values):
            target.copy_(value)


def deliver(results: list[torch.Tensor], output: Tensors | None, single: bool) -> Tensors:
    """A traced collective's results as torch_xla returns them: into `output` when given.

    Args:
        results: the op's results.
        output: the caller's `output` argument.
        single: whether the caller gave one tensor (one comes back) rather than a list.
    """
    if output is None:
        return results[0] if single else results
    copy_into(tensor_list(output)[0], results)
    return output
