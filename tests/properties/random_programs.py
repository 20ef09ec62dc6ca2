"""Programs of random ops, graph cuts and torch_xla collectives/helpers, run on one rank.

A program is a list of step names (`STEPS`). `run_program` runs it on the calling rank's device
from a fixed XLA random state and returns every random draw it made (dropout masks, `rand`,
`randn`) plus the device's random state at the end, as hex strings of their bytes, so two runs
compare bit for bit. The same function runs on every emulated rank (`xla_world.run_on`) and
natively, in a process of its own with `PJRT_DEVICE=CPU`, one CPU device and no emulation:

    PJRT_DEVICE=CPU python tests/properties/random_programs.py   # one JSON program per line in,
                                                                 # one JSON result per line out

Values that depend on the world size (all_reduce sums, gathered shapes) are never recorded:
only what the random stream gives.
"""

from __future__ import annotations

import json
import sys

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr

SEED = 1234
#: Step names a program is drawn from.
STEPS = (
    "dropout",
    "rand",
    "randn",
    "sync",
    "item",
    "all_reduce",
    "all_reduce_in_place",
    "all_gather",
    "reduce_scatter",
    "collective_broadcast",
    "rendezvous",
    "rendezvous_payload",
    "mesh_reduce",
    "optimizer_step",
    "optimizer_step_barrier",
    "broadcast_master_param",
)


def _hex(tensor: torch.Tensor) -> str:
    return tensor.detach().cpu().contiguous().numpy().tobytes().hex()


class _Machine:
    """The state a program acts on: a small model, its optimizer, and the draws made so far."""

    def __init__(self) -> None:
        self.device = torch_xla.device()
        init = torch.Generator().manual_seed(0)
        self.model = torch.nn.Linear(4, 4)
        with torch.no_grad():
            for parameter in self.model.parameters():
                parameter.copy_(torch.rand(parameter.shape, generator=init))
        self.model.to(self.device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.ones = torch.ones(16, device=self.device)
        self.pending: list[torch.Tensor] = []  # draws not yet read (they stay in the graph)

    def draw(self, tensor: torch.Tensor) -> torch.Tensor:
        self.pending.append(tensor)
        return tensor

    def train(self, barrier: bool) -> None:
        mask = self.draw(torch.nn.functional.dropout(torch.ones(4, device=self.device), 0.5))
        loss = (self.model(torch.ones(2, 4, device=self.device)) * mask).sum()
        loss.backward()
        xm.optimizer_step(self.optimizer, barrier=barrier)
        self.optimizer.zero_grad()

    def step(self, name: str) -> None:
        world = xr.world_size()
        if name == "dropout":
            self.draw(torch.nn.functional.dropout(self.ones, 0.5))
        elif name == "rand":
            self.draw(torch.rand(3, device=self.device))
        elif name == "randn":
            self.draw(torch.randn(2, 2, device=self.device))
        elif name == "sync":
            torch_xla.sync()
        elif name == "item":
            (self.ones * 2).sum().item()  # a host read: executes, does not mark a step
        elif name == "all_reduce":
            xm.all_reduce(xm.REDUCE_SUM, self.ones)
        elif name == "all_reduce_in_place":
            xm.all_reduce(xm.REDUCE_SUM, [self.ones.clone()])
        elif name == "all_gather":
            xm.all_gather(self.ones)
        elif name == "reduce_scatter":
            xm.reduce_scatter(
                xm.REDUCE_SUM, torch.ones(world * 2, device=self.device), 1.0, 0, world
            )
        elif name == "collective_broadcast":
            xm.collective_broadcast([self.ones.clone()])
        elif name == "rendezvous":
            xm.rendezvous("random-programs")
        elif name == "rendezvous_payload":
            xm.rendezvous("random-programs", b"payload")
        elif name == "mesh_reduce":
            xm.mesh_reduce("random-programs", 1.5, sum)
        elif name == "optimizer_step":
            self.train(barrier=False)
        elif name == "optimizer_step_barrier":
            self.train(barrier=True)
        elif name == "broadcast_master_param":
            xm.broadcast_master_param(self.model)
        else:
            raise ValueError(f"unknown step {name!r}")


def run_program(steps: list[str]) -> list[str]:
    """Run `steps` on this rank's device from the XLA random state `SEED`; the draws made and
    the random state left, in order, as hex strings."""
    machine = _Machine()
    torch_xla.sync()
    xm.set_rng_state(SEED)
    for name in steps:
        machine.step(name)
    draws = [_hex(t) for t in machine.pending]
    return [*draws, f"state {xm.get_rng_state()}"]


def serve() -> None:
    """Answer programs read from stdin, one JSON list per line, with their draws as JSON."""
    for line in sys.stdin:
        print(json.dumps(run_program(json.loads(line))), flush=True)


if __name__ == "__main__":
    serve()
