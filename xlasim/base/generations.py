"""TPU generations: the facts of each that a slice's identity and its memory are derived from.

Apart from `identity.py` so that a topology can check its generation's name without importing
the identity, which is derived from the topology.
"""

from __future__ import annotations

from dataclasses import dataclass

GiB = 2**30


@dataclass(frozen=True)
class Generation:
    """A TPU generation's facts as torch_xla and Cloud TPU report them."""

    version: int
    cores_per_chip: int
    #: `xm.xla_device_kind()` on that generation.
    device_kind: str
    #: High-bandwidth memory of one XLA device (a TensorCore, or a megacore chip).
    memory_per_core: int
    #: Cloud TPU's accelerator-type prefix, and what its suffix counts per chip (TensorCores:
    #: 2 on v2-v4 and v5p, whose megacore chips still count two; chips: 1 on v5e and v6e).
    type_prefix: str
    named_per_chip: int


GENERATIONS: dict[str, Generation] = {
    "v2": Generation(2, 2, "TPU v2", 8 * GiB, "v2", named_per_chip=2),
    "v3": Generation(3, 2, "TPU v3", 16 * GiB, "v3", named_per_chip=2),
    "v4": Generation(4, 1, "TPU v4", 32 * GiB, "v4", named_per_chip=2),
    "v5e": Generation(5, 1, "TPU v5 lite", 16 * GiB, "v5litepod", named_per_chip=1),
    "v5p": Generation(5, 1, "TPU v5", 95 * GiB, "v5p", named_per_chip=2),
    "v6e": Generation(6, 1, "TPU v6 lite", 32 * GiB, "v6e", named_per_chip=1),
}
