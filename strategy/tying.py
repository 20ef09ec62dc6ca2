"""Keeping tied (shared) parameters tied across a move to the XLA device.

`module.to(xla_device)` cannot move a CPU parameter in place (the XLA tensor is another kind of
tensor), so every module gets a new Parameter of its own: `layer_3.weight is layer_1.weight`
silently stops holding and the model trains two copies (Lightning #2705, pytorch/xla #2719).
The groups of names sharing one Parameter are found before the move and re-pointed at a single
Parameter after it.
"""

from __future__ import annotations

import warnings
from collections import defaultdict

import torch
from torch import nn


def find_tied_parameters(module: nn.Module) -> list[list[str]]:
    """Every group of two or more parameter names that share one Parameter object."""
    names_by_param: dict[int, list[str]] = defaultdict(list)
    for name, param in module.named_parameters(remove_duplicate=False):
        names_by_param[id(param)].append(name)
    return [names for names in names_by_param.values() if len(names) > 1]


def retie(module: nn.Module, groups: list[list[str]]) -> None:
    """Make every name of each group point at the group's first Parameter."""
    for first, *others in groups:
        shared = module.get_parameter(first)
        for name in others:
            owner_name, _, leaf = name.rpartition(".")
            setattr(module.get_submodule(owner_name), leaf, shared)


def count_parameters(module: nn.Module) -> int:
    """Distinct Parameter objects (tied ones count once)."""
    return len(list(module.parameters()))


def warn_if_count_changed(module: nn.Module, before: int) -> None:
    """Warn when the module holds another number of distinct parameters than before a move."""
    after = count_parameters(module)
    if after != before:
        warnings.warn(
            f"{type(module).__name__} had {before} distinct parameters before moving to the XLA "
            f"device and has {after} after: some shared weights are no longer tied and will "
            "train as separate copies. Tie them in __init__ (self.b.weight = self.a.weight) so "
            "they can be found and re-tied.",
            UserWarning,
            stacklevel=3,
        )


def move_module(
    module: nn.Module, device: torch.device | str, dtype: torch.dtype | None = None
) -> nn.Module:
    """`module.to(device, dtype)` in place, with tied parameters still tied afterwards."""
    groups = find_tied_parameters(module)
    before = count_parameters(module)
    module.to(device=device, dtype=dtype)
    retie(module, groups)
    warn_if_count_changed(module, before)
    return module
