"""Hypothesis strategies for distributed properties: small exact values, few shapes, composable.

Exact values: every value drawn is a small multiple of a power of two, bounded so that any sum,
product, maximum or minimum of eight of them is exactly representable in the dtype drawn
(bfloat16 included). A collective's result then equals its NumPy reference exactly, whatever
order a TPU combines ranks in, so the properties assert equality: a tolerance could hide a
dropped contribution or a wrong shard.

Few shapes: a new shape is a new XLA compilation on every device (on a TPU, every collective is
compiled), so shapes come from a small menu, scaled by the replica group size where a dimension
must split evenly.

Everything random is drawn here, in the parent: emulated ranks are threads sharing the CPU RNG,
so ranks only ever build from what they are handed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch_xla.core.xla_model as xm
from hypothesis import settings
from hypothesis import strategies as st

Groups = tuple[tuple[int, ...], ...] | None

FLOAT_DTYPES = (torch.float32, torch.bfloat16)
INT_DTYPES = (torch.int32,)
DTYPES = FLOAT_DTYPES + INT_DTYPES
#: Reduce types defined for every dtype; AND and OR need integers.
ARITHMETIC_REDUCE_TYPES = (xm.REDUCE_SUM, xm.REDUCE_MUL, xm.REDUCE_MAX, xm.REDUCE_MIN)
BITWISE_REDUCE_TYPES = (xm.REDUCE_AND, xm.REDUCE_OR)
#: Scales that keep exact values exact.
EXACT_SCALES = (1.0, 0.5, 2.0)
#: Base shapes; one dimension is then scaled by the group size.
BASE_SHAPES = ((1,), (2,), (2, 3), (3, 1), (1, 2, 2))


def budget(cap: int) -> settings:
    """Settings for a property: at most `cap` examples, fewer when the loaded profile asks for
    fewer (`xla-tpu` runs 25, the mutation run's profile fewer still), so a test's cap never
    raises a profile's budget; and a failure prints the blob that replays it
    (`@reproduce_failure`), besides being kept in the profile's example database."""
    return settings(max_examples=min(cap, settings().max_examples), print_blob=True)


# ------------------------------------------------------------------------------ values


def exact_values(dtype: torch.dtype, reduce_type: str = xm.REDUCE_SUM) -> st.SearchStrategy:
    """Scalars whose combination over up to 8 ranks by `reduce_type` is exact in `dtype`."""
    integer = not dtype.is_floating_point
    if reduce_type in BITWISE_REDUCE_TYPES:
        return st.integers(0, 255)
    if reduce_type == xm.REDUCE_MUL:  # |product| <= 2**8, |exponent| <= 8
        return st.sampled_from([-2, -1, 0, 1, 2] if integer else [-2.0, -1.0, -0.5, 0.5, 1.0, 2.0])
    if integer:
        return st.integers(-(2**10), 2**10)
    if dtype == torch.bfloat16:  # sums of 8: multiples of 1/4 below 2**5, 7 significant bits
        return st.integers(-16, 16).map(lambda i: i / 4)
    return st.integers(-(2**12), 2**12).map(lambda i: i / 16)


def reduce_types(dtype: torch.dtype) -> st.SearchStrategy[str]:
    """The xm reduce types `dtype` supports."""
    bitwise = () if dtype.is_floating_point else BITWISE_REDUCE_TYPES
    return st.sampled_from(ARITHMETIC_REDUCE_TYPES + bitwise)


def scales(dtype: torch.dtype) -> st.SearchStrategy[float]:
    """A collective's `scale`: exact ones for floats; integers are only ever scaled by 1."""
    return st.sampled_from(EXACT_SCALES if dtype.is_floating_point else (1.0,))


def per_rank_arrays(
    world_size: int, shape: tuple[int, ...], dtype: torch.dtype, values: st.SearchStrategy
) -> st.SearchStrategy[list[np.ndarray]]:
    """One array of `shape` per rank, filled from `values`, as float64 or int64 (the
    reference's dtypes: they hold every exact value of `dtype`)."""
    wide = np.float64 if dtype.is_floating_point else np.int64
    size = int(np.prod(shape))
    one = st.lists(values, min_size=size, max_size=size).map(
        lambda flat: np.array(flat, dtype=wide).reshape(shape)
    )
    return st.lists(one, min_size=world_size, max_size=world_size)


def to_tensors(arrays: Sequence[np.ndarray], dtype: torch.dtype) -> list[torch.Tensor]:
    """CPU tensors of `dtype` for the ranks (each rank moves its own to its device)."""
    return [torch.tensor(array, dtype=dtype) for array in arrays]


# ------------------------------------------------------------------------------ worlds and groups


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def replica_groups(draw: st.DrawFn, world_size: int) -> Groups:
    """None (the whole world) or a partition of the ranks into equal groups, each listing its
    members in ascending order (as torch_xla users write them), possibly interleaved."""
    size = draw(st.sampled_from(divisors(world_size)))
    if size == world_size:
        return draw(st.sampled_from([None, (tuple(range(world_size)),)]))
    order = draw(st.permutations(range(world_size)))
    return tuple(sorted(tuple(sorted(order[i : i + size])) for i in range(0, world_size, size)))


def as_lists(groups: Groups) -> list[list[int]] | None:
    """Groups as torch_xla's signatures spell them."""
    return None if groups is None else [list(group) for group in groups]


def group_size(world_size: int, groups: Groups) -> int:
    return world_size if groups is None else len(groups[0])


@dataclass(frozen=True)
class Layout:
    """Where a collective runs and on what shape: `shape[dim]` is a multiple of the group size."""

    world_size: int
    groups: Groups
    shape: tuple[int, ...]
    dim: int

    @property
    def group_size(self) -> int:
        return group_size(self.world_size, self.groups)


@st.composite
def layouts(draw: st.DrawFn, world_sizes: Sequence[int], grouped: bool = True) -> Layout:
    """A world size, replica groups (or the whole world) and a shape split along `dim`."""
    world_size = draw(st.sampled_from(world_sizes))
    groups = draw(replica_groups(world_size)) if grouped else None
    base = draw(st.sampled_from(BASE_SHAPES))
    dim = draw(st.integers(0, len(base) - 1))
    shape = list(base)
    shape[dim] *= group_size(world_size, groups)
    return Layout(world_size, groups, tuple(shape), dim)


def ring(world_size: int, step: int = 1) -> list[list[int]]:
    """collective_permute pairs sending rank r's tensor to rank r + step (mod world size)."""
    return [[r, (r + step) % world_size] for r in range(world_size)]


@st.composite
def permutation_pairs(draw: st.DrawFn, world_size: int) -> list[list[int]]:
    """collective_permute pairs: a partial permutation (ranks no pair targets receive zeros)."""
    targets = draw(st.permutations(range(world_size)))
    keep = draw(st.lists(st.booleans(), min_size=world_size, max_size=world_size))
    return [[source, target] for source, (target, kept) in enumerate(zip(targets, keep)) if kept]


# ------------------------------------------------------------------------------ whole examples


@dataclass(frozen=True)
class CollectiveInput:
    """Everything one collective call needs: where, on what, combined how, and each rank's data."""

    layout: Layout
    dtype: torch.dtype
    reduce_type: str
    scale: float
    arrays: list[np.ndarray]

    def tensors(self) -> list[torch.Tensor]:
        return to_tensors(self.arrays, self.dtype)


@st.composite
def collective_inputs(
    draw: st.DrawFn,
    world_sizes: Sequence[int],
    *,
    dtypes: Sequence[torch.dtype] = DTYPES,
    reduce_type: str | None = None,
    scaled: bool = True,
    grouped: bool = True,
) -> CollectiveInput:
    """A layout, a dtype, a reduce type (drawn unless given), a scale and per-rank data whose
    reduction is exact."""
    layout = draw(layouts(world_sizes, grouped=grouped))
    dtype = draw(st.sampled_from(dtypes))
    if reduce_type is None:
        reduce_type = draw(reduce_types(dtype))
    scale = draw(scales(dtype)) if scaled else 1.0
    values = exact_values(dtype, reduce_type)
    arrays = draw(per_rank_arrays(layout.world_size, layout.shape, dtype, values))
    return CollectiveInput(layout, dtype, reduce_type, scale, arrays)
