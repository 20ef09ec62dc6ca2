"""Random streams as on a TPU: for drawn programs of random ops, graph cuts and torch_xla's
collectives and helpers (`random_programs.STEPS`), every rank of an emulated world, of 1 and of
N cores, draws bit for bit what native torch_xla draws running the same program on one CPU
device. torch_xla advances a device's random state at every graph cut (`torch_xla.sync()`), and
its helpers cut the graph in patterns of their own (`xm.rendezvous` two or three times): each
TPU process draws what one device draws (docs/fidelity.md, "Random streams").

The reference runs in a process of its own: `PJRT_DEVICE=CPU`, one device, no xlasim.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import random_programs
from drawing import budget
from hypothesis import given
from hypothesis import strategies as st

#: How long the reference may take to answer one program (its first includes torch_xla's import).
REFERENCE_TIMEOUT = 120.0


@pytest.fixture(scope="module")
def native_draws(emulated) -> Iterator[Callable[[list[str]], list[str]]]:
    """A function giving what native torch_xla on one CPU device draws for a program."""
    if not emulated:
        pytest.skip(
            "the reference is torch_xla on one CPU device; a TPU's generator draws other bits"
        )
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("XLASIM_", "CPU_NUM_DEVICES", "TPU_", "PYTEST_"))
    }
    environment["PJRT_DEVICE"] = "CPU"
    child = subprocess.Popen(
        [sys.executable, str(Path(random_programs.__file__))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=environment,
    )

    def draws(steps: list[str]) -> list[str]:
        child.stdin.write(json.dumps(steps) + "\n")
        child.stdin.flush()
        line = child.stdout.readline()
        if not line:
            raise RuntimeError(f"the native reference process ended (exit {child.wait(10)})")
        return json.loads(line)

    try:
        yield draws
    finally:
        child.stdin.close()
        child.wait(REFERENCE_TIMEOUT)


programs = st.lists(st.sampled_from(random_programs.STEPS), min_size=1, max_size=8)


@budget(40)
@given(data=st.data())
def test_every_rank_draws_what_one_native_device_draws(xla_world, world_sizes, native_draws, data):
    steps = data.draw(programs, label="program")
    size = data.draw(st.sampled_from(sorted({1, max(world_sizes)})), label="world size")

    expected = native_draws(steps)
    results = xla_world.run_on(size, random_programs.run_program, steps)

    for rank, drawn in enumerate(results):
        assert drawn == expected, (
            f"rank {rank} of {size} drew otherwise than one native CPU device for {steps}"
        )
