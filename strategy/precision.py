"""Numeric precision of training: `32-true`, `bf16-true`, `bf16-mixed`.

Each mode uses a mechanism torch and torch_xla support today:
- `32-true`: parameters and computation in float32.
- `bf16-true`: parameters are converted to bfloat16 when moved to the device (`Module.to`), and
  floating-point inputs are cast to bfloat16, so the whole computation runs in bfloat16.
- `bf16-mixed`: parameters stay float32; the forward pass runs under `torch.autocast("xla",
  dtype=torch.bfloat16)`, which casts per op (matmuls in bfloat16, reductions in float32).
  On a TPU this is what `torch_xla.amp.autocast` does; it is used directly because
  `torch_xla.amp.autocast` ignores non-TPU hardware, and emulation runs on XLA:CPU.

The `XLA_USE_BF16` environment variable is deprecated upstream and not offered: it changes every
float tensor of the process behind the program's back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Precision:
    """One precision mode: what dtype parameters get, and how the forward pass runs."""

    name: str
    param_dtype: torch.dtype | None = None
    autocast_dtype: torch.dtype | None = None

    def convert_input(self, data: Any) -> Any:
        """Cast floating-point tensors in `data` (nested tuples, lists, dicts) to the parameter
        dtype; everything else is returned as is."""
        if self.param_dtype is None:
            return data
        if isinstance(data, torch.Tensor):
            return data.to(self.param_dtype) if data.is_floating_point() else data
        if isinstance(data, Mapping):
            return type(data)({k: self.convert_input(v) for k, v in data.items()})
        if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
            return type(data)(*(self.convert_input(v) for v in data))
        if isinstance(data, (list, tuple)):
            return type(data)(self.convert_input(v) for v in data)
        return data

    @contextlib.contextmanager
    def forward_context(self) -> Iterator[None]:
        """Where the forward pass (and loss) runs."""
        if self.autocast_dtype is None:
            yield
            return
        with torch.autocast("xla", dtype=self.autocast_dtype):
            yield


PRECISIONS: dict[str, Precision] = {
    "32-true": Precision("32-true"),
    "bf16-true": Precision("bf16-true", param_dtype=torch.bfloat16),
    "bf16-mixed": Precision("bf16-mixed", autocast_dtype=torch.bfloat16),
}


def select_precision(precision: str | Precision | None) -> Precision:
    """The Precision for a name (None means `32-true`), or a ValueError listing what exists."""
    if isinstance(precision, Precision):
        return precision
    name = "32-true" if precision is None else str(precision)
    if name in PRECISIONS:
        return PRECISIONS[name]
    hint = ""
    if name.startswith("16") or name.startswith("fp16"):
        hint = " XLA devices compute in bfloat16, not float16: use 'bf16-mixed' or 'bf16-true'."
    raise ValueError(
        f"precision={precision!r} is not supported; choose one of {sorted(PRECISIONS)}.{hint}"
    )
