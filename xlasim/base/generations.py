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


#: Each generation's HBM is its Cloud TPU system-architecture page's figure (the page and the
#: figure beside each row, read 2026-11), per XLA device: a v2/v3 chip's HBM is split between
#: its two TensorCores, each an XLA device; v4 and v5p chips are megacores (one device of the
#: chip's two TensorCores), v5e and v6e chips have one TensorCore. v5e and v6e pages say "GB"
#: where the others say "GiB"; xm.get_memory_info reports binary sizes, so GiB is kept.
GENERATIONS: dict[str, Generation] = {
    # cloud.google.com/tpu/docs/v2: "HBM2 capacity and bandwidth: 16 GiB, 600 GBps" per chip
    "v2": Generation(2, 2, "TPU v2", 8 * GiB, "v2", named_per_chip=2),
    # cloud.google.com/tpu/docs/v3: "HBM2 capacity and bandwidth: 32 GiB, 900 GBps" per chip
    "v3": Generation(3, 2, "TPU v3", 16 * GiB, "v3", named_per_chip=2),
    # cloud.google.com/tpu/docs/v4: "HBM2 capacity and bandwidth: 32 GiB, 1200 GBps" per chip
    "v4": Generation(4, 1, "TPU v4", 32 * GiB, "v4", named_per_chip=2),
    # cloud.google.com/tpu/docs/v5e: "HBM capacity per chip: 16 GB"
    "v5e": Generation(5, 1, "TPU v5 lite", 16 * GiB, "v5litepod", named_per_chip=1),
    # cloud.google.com/tpu/docs/v5p: "HBM capacity per chip (GiB): 95", 2 TensorCores per chip
    "v5p": Generation(5, 1, "TPU v5", 95 * GiB, "v5p", named_per_chip=2),
    # cloud.google.com/tpu/docs/v6e: "HBM capacity per chip: 32 GB", 8 chips per host
    "v6e": Generation(6, 1, "TPU v6 lite", 32 * GiB, "v6e", named_per_chip=1),
}
