"""What the emulated slice says it is: the TPU VM that torch_xla's own queries describe.

torch_xla code branches on the hardware it runs on (`xm.xla_device_hw`, `xr.device_type`,
`torch_xla._internal.tpu`), and TPU-gated tests skip silently on anything else. One identity,
derived from the topology, answers all of those queries the way the matching Cloud TPU VM does,
without a network call: the accelerator type, the chips and cores of each host, the host bounds,
the worker id and hostnames, each device's coordinates and memory. The values underneath (the XLA
CPU devices and their computations) do not change; only the answers to "what is this?" do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .generations import GENERATIONS, Generation
from .topology import Topology

#: Host bounds Cloud TPU gives v2/v3 pod slices (torch_xla's `_ACCELERATOR_TYPE_TO_HOST_BOUNDS`).
_V2_V3_HOST_BOUNDS = {1: (1, 1, 1), 4: (2, 2, 1), 8: (2, 4, 1), 16: (4, 4, 1), 32: (4, 8, 1)}


def _near_square(count: int) -> tuple[int, int, int]:
    """`count` laid out as an x-by-y grid, x <= y, as TPU slices of 2D generations are."""
    x = max(d for d in range(1, math.isqrt(count) + 1) if count % d == 0)
    return (x, count // x, 1)


@dataclass(frozen=True)
class Identity:
    """The TPU VM (or pod slice) an emulated topology stands for."""

    topology: Topology
    generation: Generation

    @classmethod
    def of(cls, topology: Topology) -> Identity:
        return cls(topology, GENERATIONS[topology.generation])

    # ------------------------------------------------------------------ the slice

    @property
    def chips(self) -> int:
        return max(1, self.topology.devices // self.generation.cores_per_chip)

    @property
    def chips_per_host(self) -> int:
        return max(1, self.chips // self.topology.hosts)

    @property
    def slices(self) -> int:
        return self.topology.slices

    @property
    def chips_per_slice(self) -> int:
        return max(1, self.chips // self.slices)

    @property
    def hosts_per_slice(self) -> int:
        return self.topology.hosts // self.slices

    @property
    def devices_per_slice(self) -> int:
        return self.topology.devices // self.slices

    @property
    def accelerator_type(self) -> str:
        """`v4-8`, `v5litepod-8`, ...: what `TPU_ACCELERATOR_TYPE` says on that slice (on a
        multislice, each slice's own type)."""
        generation = self.generation
        return f"{generation.type_prefix}-{self.chips_per_slice * generation.named_per_chip}"

    @property
    def chips_per_host_bounds(self) -> tuple[int, int, int]:
        return _near_square(self.chips_per_host)

    @property
    def host_bounds(self) -> tuple[int, int, int]:
        """How one slice's hosts tile it."""
        hosts = self.hosts_per_slice
        if self.generation.version <= 3 and hosts in _V2_V3_HOST_BOUNDS:
            return _V2_V3_HOST_BOUNDS[hosts]
        if self.generation.type_prefix in ("v4", "v5p"):
            return (1, 1, hosts)  # 3D tori stack hosts along z
        return _near_square(hosts)

    def worker_hostnames(self) -> list[str]:
        """One loopback address per emulated host: distinct, and reachable from every host."""
        return [f"127.0.0.{host + 1}" for host in range(self.topology.hosts)]

    def tpu_env(self, host: int) -> dict[str, str]:
        """The `tpu-env` metadata of a host, keyed as `torch_xla._internal.tpu` reads it."""
        return {
            "ACCELERATOR_TYPE": self.accelerator_type,
            "TPU_PROCESS_BOUNDS": _bounds(self.host_bounds),
            "TPU_CHIPS_PER_PROCESS_BOUNDS": _bounds(self.chips_per_host_bounds),
            "WORKER_ID": str(host % self.hosts_per_slice),  # numbered within its slice
        }

    # ------------------------------------------------------------------ devices

    def device_name(self, ordinal: int) -> str:
        return f"TPU:{ordinal}"

    def device_attributes(self, ordinal: int) -> dict[str, object]:
        """`xr.runtime_device_attributes` of global device `ordinal`: its chip's coordinates in
        its slice (hosts tiled by the host bounds, x fastest), its core on the chip and the
        chip's cores, the keys a TPU's PJRT device has (torch_xla's `pjrt/test_runtime_tpu.py`
        checks them); on a multislice, also the slice it belongs to (devices numbered slice
        after slice) and how many there are, as the TPU runtime adds them for `xs.HybridMesh`.
        `xr.global_runtime_device_attributes` adds each device's `name` (`device_name`)."""
        slice_index, in_slice = divmod(ordinal, self.devices_per_slice)
        chip, core = divmod(in_slice, self.generation.cores_per_chip)
        host, local_chip = divmod(chip, self.chips_per_host)
        cx, cy, cz = self.chips_per_host_bounds
        hx, hy, _ = self.host_bounds
        local = (local_chip % cx, (local_chip // cx) % cy, local_chip // (cx * cy))
        origin = (host % hx, (host // hx) % hy, host // (hx * hy))
        coords = [o * c + lc for o, c, lc in zip(origin, (cx, cy, cz), local)]
        attributes: dict[str, object] = {
            "coords": coords,
            "core_on_chip": core,
            "num_cores": self.generation.cores_per_chip,
        }
        if self.slices > 1:
            attributes.update(slice_index=slice_index, num_slices=self.slices)
        return attributes


def _bounds(shape: tuple[int, int, int]) -> str:
    return ",".join(map(str, shape))
