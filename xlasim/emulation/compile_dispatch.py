"""Emulated `xm` collectives under `torch.compile`: what dynamo traces in their place.

Dynamo cannot trace the emulation (rank threads, locks, frame inspection), so when it traces an
`xm` collective the collective becomes one opaque op, `xlasim::collective(Tensor[] tensors,
str request) -> Tensor[]` (defined, with its kernels, in `compiled.py`), and collectives that
cannot be graph nodes (send, recv, rendezvous) break the graph, as torch_xla's do on a TPU. Each
emulated collective says which with one decorator (`traced_as`, `between_graphs`).
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
    """The op's `request` argument; a constant of the traced graph (dynamo calls this once)."""
    return json.dumps([op, args])


def call(op: str, tensors: list[torch.Tensor], **args: Any) -> list[torch.Tensor]:
    """Run emulated collective `op` (an `xm` function name) through the op: in a graph when
    traced, else now."""
    return torch.ops.xlasim.collective(tensors, request(op, args))


# ------------------------------------------------------------------------------ xm, traced

Tensors = torch.Tensor | list[torch.Tensor]


def _tensors(value: Tensors) -> tuple[list[torch.Tensor], bool]:
    return ([value], True) if isinstance(value, torch.Tensor) else (list(value), False)


def _copy_into(targets: Sequence[torch.Tensor], values: Sequence[torch.Tensor]) -> None:
    with torch.no_grad():
        for target, value in zip(targets, values):
            target.copy_(value)


def _deliver(results: list[torch.Tensor], output: Tensors | None, single: bool) -> Tensors:
    if output is None:
        return results[0] if single else results
    _copy_into(_tensors(output)[0], results)
    return output


def all_reduce(reduce_type: str, inputs: Tensors, scale: float, groups: Any) -> Tensors:
    """xm.all_reduce under dynamo: a list is reduced in place."""
    tensors, single = _tensors(inputs)
    results = call("all_reduce", tensors, reduce_type=reduce_type, scale=scale, groups=groups)
    if single:
        return results[0]
    _copy_into(tensors, results)
    return inputs


def all_gather(value: Tensors, dim: int, groups: Any, output: Tensors | None) -> Tensors:
    """xm.all_gather under dynamo."""
    tensors, single = _tensors(value)
    return _deliver(call("all_gather", tensors, dim=dim, groups=groups), output, single)


def reduce_scatter(
    reduce_type: str,
    input: Tensors,
    scale: float,
    scatter_dim: int,
    shard_count: int,
    groups: Any,
    output: Tensors | None,
) -> Tensors:
    """xm.reduce_scatter under dynamo."""
    tensors, single = _tensors(input)
    results = call(
        "reduce_scatter",
        tensors,
        reduce_type=reduce_type,
        scale=scale,
        scatter_dim=scatter_dim,
        shard_count=shard_count,
        groups=groups,
    )
    return _deliver(results, output, single)


def all_to_all(
    value: torch.Tensor, split_dimension: int, concat_dimension: int, split_count: int, groups: Any
) -> torch.Tensor:
    """xm.all_to_all under dynamo."""
    return call(
        "all_to_all",
        [value],
        split_dimension=split_dimension,
        concat_dimension=concat_dimension,
        split_count=split_count,
        groups=groups,
    )[0]


def collective_permute(value: torch.Tensor, pairs: Any) -> torch.Tensor:
    """xm.collective_permute under dynamo."""
    return call("collective_permute", [value], pairs=pairs)[0]


def collective_broadcast(tensors: list[torch.Tensor], root_ordinal: int, groups: Any) -> None:
    """xm.collective_broadcast under dynamo (in place)."""
    values = call("collective_broadcast", list(tensors), root_ordinal=root_ordinal, groups=groups)
    _copy_into(tensors, values)
