"""Handing a collective's results back as torch_xla does: new tensors, or into the caller's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ._arguments import as_list


def copy_into(targets: Sequence[torch.Tensor], values: Sequence[torch.Tensor]) -> None:
    """Write results into caller-given tensors; as torch_xla's `_out` ops do, an output whose
    shape differs from the result (a full-size buffer for a shard) takes the result's shape.

    Args:
        targets: the caller's tensors.
        values: the results, one per target.
    """
    with torch.no_grad():
        for target, value in zip(targets, values):
            if target.shape != value.shape:
                target.resize_(value.shape)
            target.copy_(value)


def deliver(results: list[torch.Tensor], output: Any, single: bool) -> Any:
    """Return results as torch_xla does: into `output` when given, else one tensor or a list.

    Args:
        results: the collective's results on the caller's device.
        output: the caller's `output` argument (a tensor, a list of them, or None).
        single: whether the caller gave one tensor rather than a list.
    """
    if output is None:
        return results[0] if single else results
    outputs, _ = as_list(output, "output")
    if len(outputs) != len(results):
        raise ValueError(
            f"`output` length doesn't match `input` length: {len(outputs)} vs {len(results)}."
        )
    copy_into(outputs, results)
    return output
