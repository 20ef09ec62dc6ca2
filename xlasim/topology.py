"""The shape of an emulated slice: how many cores, and how they map to devices.

Ranks run as threads of this process, one per core, like torch_xla's own thread-per-device
runtime on CPU: one host, one process, N local devices, rank i bound to `xla:i`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Topology:
    """A one-host, one-process slice of `devices` cores."""

    devices: int

    def device_of(self, rank: int) -> str:
        return f"xla:{rank}"

    def local_rank_of(self, rank: int) -> int:
        return rank

    def describe(self) -> str:
        return f"1 host x 1 process x {self.devices} cores (threads)"
