"""Which arithmetic f32 matmuls and convolutions take: the TPU's MXU (default) or the CPU's
exact f32. Free of torch, so `emulate` can take the choice before the zygote starts."""

from __future__ import annotations

import os

ARITHMETIC_ENV = "XLASIM_ARITHMETIC"
#: What `XLASIM_ARITHMETIC` accepts: the TPU's MXU (default) or the CPU's exact f32.
ARITHMETICS = ("tpu", "exact")


def check_arithmetic(value: str, source: str) -> str:
    """`value` if it names an arithmetic, else an error naming where it came from.

    Args:
        value: what the user asked for.
        source: where it was asked (an option, a variable), for the message.
    """
    if value not in ARITHMETICS:
        raise ValueError(f"{source}={value!r}: the arithmetic is 'tpu' (default) or 'exact'")
    return value


def emulating() -> bool:
    """Whether f32 matmuls and convolutions compute as on a TPU now (read at every call, so a
    worker process follows its job's environment)."""
    return os.environ.get(ARITHMETIC_ENV, "tpu") != "exact"
