"""The shape of an emulated slice: cores, the processes that hold them, the hosts that hold those.

Rank r lives in process `r // cores_per_process` (as `xla:{r % cores_per_process}` there), and
process p on host `p // processes_per_host`. One process holding every core is torch_xla's own
thread-per-device CPU runtime; several processes reproduce TPU v2/v3 hosts (4 processes x 2 cores)
and v4+ (one process per chip); several hosts reproduce a pod slice, where local rank, local
process and the filesystem differ from host to host.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import DeviceCountError
from .generations import GENERATIONS
from .public import public

#: The TPU generation a slice claims to be unless told otherwise (see `identity.py`).
DEFAULT_GENERATION = "v5e"


@public
@dataclass(frozen=True)
class Topology:
    """A slice of `devices` cores in `processes` processes on `hosts` hosts, of a TPU
    `generation` (what the slice answers to hardware queries, see `identity.py`).

    `processes` defaults to one per core, as on TPU v4 and later (one process per chip): every
    rank has its own Python globals, environment and CPU generators. `processes=1` puts every
    core in one process as threads (torch_xla's CPU runtime): faster, but ranks share those.

    Args:
        devices: emulated cores (XLA devices).
        processes: processes holding them, each an equal share (default: one per core).
        hosts: emulated hosts holding the processes, each an equal share.
        generation: the TPU generation it claims to be (`generations.GENERATIONS`).
        slices: slices joined over the data-center network (multislice).
    """

    devices: int
    processes: int | None = None
    hosts: int = 1
    generation: str = DEFAULT_GENERATION
    #: Slices joined over the data-center network (multislice): each holds devices/slices
    #: cores on hosts/slices hosts, and TPU device attributes carry a `slice_index`.
    slices: int = 1

    def __post_init__(self) -> None:
        if self.processes is None:
            object.__setattr__(self, "processes", self.devices)

        if self.generation not in GENERATIONS:
            raise DeviceCountError(
                f"unknown TPU generation {self.generation!r}; known: {', '.join(GENERATIONS)}"
            )
        if self.devices < 1 or self.processes < 1 or self.hosts < 1:
            raise DeviceCountError(
                f"a slice needs at least one of each, got {self.devices} cores in "
                f"{self.processes} processes on {self.hosts} hosts"
            )
        if self.devices % self.processes:
            raise DeviceCountError(
                f"{self.devices} cores cannot be split evenly over {self.processes} processes"
            )
        if self.processes % self.hosts:
            raise DeviceCountError(
                f"{self.processes} processes cannot be split evenly over {self.hosts} hosts"
            )
        if self.slices < 1 or self.hosts % self.slices:
            raise DeviceCountError(
                f"{self.hosts} hosts cannot be split evenly over {self.slices} slices"
            )

    @property
    def cores_per_process(self) -> int:
        return self.devices // self.processes

    @property
    def processes_per_host(self) -> int:
        return self.processes // self.hosts

    @property
    def cores_per_host(self) -> int:
        return self.devices // self.hosts

    @property
    def threaded(self) -> bool:
        """Every core in this one process: ranks are threads, nothing is spawned."""
        return self.processes == 1

    def process_of(self, rank: int) -> int:
        return rank // self.cores_per_process

    def host_of(self, rank: int) -> int:
        return self.process_of(rank) // self.processes_per_host

    def device_of(self, rank: int) -> str:
        """The rank's device as named inside its own process."""
        return f"xla:{rank % self.cores_per_process}"

    def local_rank_of(self, rank: int) -> int:
        """Rank within its host (what `xr.local_ordinal()` answers)."""
        return rank % self.cores_per_host

    def describe(self) -> str:
        def count(n: int, noun: str) -> str:
            return f"{n} {noun}{'es' if noun.endswith('s') and n > 1 else 's' if n > 1 else ''}"

        described = (
            f"{count(self.hosts, 'host')} x {count(self.processes_per_host, 'process')} x "
            f"{count(self.cores_per_process, 'core')} = {self.devices} cores"
        )
        return described if self.slices == 1 else f"{described}, in {self.slices} slices"


#: Common slices, by the names Cloud TPU uses. Cores are TensorCores as torch_xla counts devices.
PRESETS: dict[str, tuple[Topology, str]] = {
    "cpu-8": (Topology(8, 1), "torch_xla's CPU runtime: one process, a thread per device"),
    "v2-8": (Topology(8, 4, generation="v2"), "TPU v2 host: 4 processes x 2 cores"),
    "v3-8": (Topology(8, 4, generation="v3"), "TPU v3 host: 4 processes x 2 cores"),
    "v4-8": (Topology(4, 4, generation="v4"), "TPU v4 host: 4 chips, one process per chip"),
    "v4-16": (Topology(8, 8, 2, "v4"), "two v4 hosts: 8 chips, one process per chip"),
    "v5e-8": (Topology(8, 8, generation="v5e"), "TPU v5e host: 8 chips, one process per chip"),
    "v5p-8": (Topology(4, 4, generation="v5p"), "TPU v5p host: 4 chips, one process per chip"),
    "v5p-16": (Topology(8, 8, 2, "v5p"), "two v5p hosts: 8 chips, one process per chip"),
    "v6e-8": (Topology(8, 8, generation="v6e"), "TPU v6e host: 8 chips, one process per chip"),
    "v3-32": (Topology(32, 16, 4, "v3"), "four v3 hosts: 4 processes x 2 cores each"),
    "2xv5e-8": (
        Topology(16, 16, 2, "v5e", slices=2),
        "multislice: two v5e-8 slices (one host of 8 chips each) joined over DCN",
    ),
}


def preset(name: str) -> Topology:
    """The slice of a named preset.

    Args:
        name: a key of `PRESETS` (`v5e-8`, `v4-16`, `2xv5e-8`...; `xlasim topologies`).
    """
    try:
        return PRESETS[name][0]
    except KeyError:
        raise DeviceCountError(f"unknown topology {name!r}; known: {', '.join(PRESETS)}") from None
