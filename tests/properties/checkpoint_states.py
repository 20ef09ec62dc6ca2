"""Drawn checkpoint states: nested dicts, lists and tuples of plain Python values, tensors of
several dtypes, tensors saved together with views of themselves, and optimizer states.

A state is drawn as a *spec* in the parent and `materialize`d on each rank onto its own device
(views must be views of a device tensor, and ranks must not share objects). Specs compare and
print like the values they stand for, so a failing example reads as the state that broke.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import strategies as st

SHAPES = ((4,), (2, 3), (3, 2))
TENSOR_DTYPES = (torch.float32, torch.bfloat16, torch.int32, torch.int64)
#: View makers, by name, for a base tensor of one of SHAPES.
VIEWS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "narrow": lambda t: t.narrow(0, 1, t.size(0) - 1),
    "flat": lambda t: t.view(-1),
    "every_other": lambda t: t.view(-1)[::2],
    "select": lambda t: t.select(0, 0),
    "transpose": lambda t: t.t() if t.dim() == 2 else t.unsqueeze(0).t(),
}


@dataclass(frozen=True)
class TensorSpec:
    dtype: torch.dtype
    shape: tuple[int, ...]
    values: tuple[int, ...]

    def build(self, device: torch.device) -> torch.Tensor:
        # ints of at most 2**7 in magnitude are exact in every dtype drawn (bfloat16 included)
        return torch.tensor(self.values, dtype=self.dtype).reshape(self.shape).to(device)


@dataclass(frozen=True)
class WithViews:
    """A tensor and views of it, saved side by side (known bug 4)."""

    base: TensorSpec
    views: tuple[str, ...]

    def build(self, device: torch.device) -> list[torch.Tensor]:
        base = self.base.build(device)
        return [base, *(VIEWS[name](base) for name in self.views)]


@dataclass(frozen=True)
class OptimizerSpec:
    """`optimizer.state_dict()` after `steps` steps of a small model on the device."""

    kind: str
    steps: int

    def build(self, device: torch.device) -> dict[str, Any]:
        generator = torch.Generator().manual_seed(self.steps)
        weight = torch.nn.Parameter(torch.randn(3, 2, generator=generator).to(device))
        if self.kind == "adam":
            optimizer = torch.optim.Adam([weight], lr=0.1)
        else:
            optimizer = torch.optim.SGD([weight], lr=0.1, momentum=0.9)
        inputs = torch.randn(4, 2, generator=generator).to(device)
        for _ in range(self.steps):
            (inputs @ weight.t()).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
        return optimizer.state_dict()


Leaf = TensorSpec | WithViews | OptimizerSpec


@st.composite
def tensor_specs(draw: st.DrawFn) -> TensorSpec:
    dtype = draw(st.sampled_from(TENSOR_DTYPES))
    shape = draw(st.sampled_from(SHAPES))
    size = shape[0] * (shape[1] if len(shape) > 1 else 1)
    values = draw(st.lists(st.integers(-(2**7), 2**7), min_size=size, max_size=size))
    return TensorSpec(dtype, shape, tuple(values))


def python_values() -> st.SearchStrategy:
    """Plain values a `weights_only` load accepts. Not `b""`: torch.save pickles it as a call
    of the `bytes` global, which torch.load(weights_only=True) refuses (torch 2.9)."""
    return (
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False)
        | st.text(max_size=10)
        | st.binary(min_size=1, max_size=10)
    )


def leaves() -> st.SearchStrategy:
    return st.one_of(
        python_values(),
        tensor_specs(),
        st.builds(
            WithViews,
            tensor_specs(),
            st.lists(st.sampled_from(sorted(VIEWS)), min_size=1, max_size=3).map(tuple),
        ),
        st.builds(OptimizerSpec, st.sampled_from(["sgd", "adam"]), st.integers(0, 2)),
    )


def nested_states() -> st.SearchStrategy[dict[str, Any]]:
    """A checkpoint: a dict of nested dicts, lists and tuples of drawn leaves."""
    keys = st.text(alphabet="abcxyz_", min_size=1, max_size=4)
    tree = st.recursive(
        leaves(),
        lambda children: (
            st.lists(children, max_size=3)
            | st.tuples(children, children)
            | st.dictionaries(keys, children, max_size=3)
        ),
        max_leaves=8,
    )
    return st.dictionaries(keys, tree, min_size=1, max_size=4)


def materialize(spec: Any, device: torch.device) -> Any:
    """The state a spec stands for, with its tensors on `device`."""
    if isinstance(spec, (TensorSpec, WithViews, OptimizerSpec)):
        return spec.build(device)
    if isinstance(spec, dict):
        return {key: materialize(value, device) for key, value in spec.items()}
    if isinstance(spec, (list, tuple)):
        return type(spec)(materialize(value, device) for value in spec)
    return spec


def to_cpu(state: Any) -> Any:
    """`state` with every tensor copied to the CPU (what a rank hands back to compare)."""
    if isinstance(state, torch.Tensor):
        return state.detach().cpu()
    if isinstance(state, dict):
        return {key: to_cpu(value) for key, value in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(to_cpu(value) for value in state)
    return state


def assert_same_state(loaded: Any, original: Any, where: str = "state") -> None:
    """Same structure, container types, dict key order, Python values and types; tensors of the
    same dtype, shape and values, on the CPU."""
    if isinstance(original, torch.Tensor):
        assert isinstance(loaded, torch.Tensor), f"{where}: {type(loaded).__name__}, not a tensor"
        assert loaded.device.type == "cpu", f"{where}: loaded onto {loaded.device}"
        assert loaded.dtype == original.dtype, f"{where}: {loaded.dtype} != {original.dtype}"
        assert loaded.shape == original.shape, f"{where}: {loaded.shape} != {original.shape}"
        assert torch.equal(loaded, original), f"{where}: {loaded} != {original}"
        return
    assert type(loaded) is type(original), f"{where}: {type(loaded)} != {type(original)}"
    if isinstance(original, dict):
        assert list(loaded) == list(original), f"{where}: keys {list(loaded)} != {list(original)}"
        for key in original:
            assert_same_state(loaded[key], original[key], f"{where}[{key!r}]")
    elif isinstance(original, (list, tuple)):
        assert len(loaded) == len(original), f"{where}: length {len(loaded)} != {len(original)}"
        for i, (mine, theirs) in enumerate(zip(loaded, original)):
            assert_same_state(mine, theirs, f"{where}[{i}]")
    else:
        assert loaded == original, f"{where}: {loaded!r} != {original!r}"
