"""A process outside any launch is what it is on a TPU VM: a world of 1 on its first device,
where torch_xla's collectives take their world-of-1 paths (issue 23; torch_xla's TPU-gated
test_zero1.py relies on it). Under `xlasim run --devices 1` such a program returns, bit for bit,
what it returns natively on one CPU device; on a slice of several cores it also warns, since a
collective that never reached a rank is likely a mistake there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROGRAM = Path(__file__).with_name("world_of_one_program.py")
ROOT = PROGRAM.parents[2]


def run(*command: str, options: tuple[str, ...] = ()) -> dict:
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("XLASIM_", "PJRT_DEVICE", "CPU_NUM_DEVICES"))
    }
    environment["PJRT_DEVICE"] = "CPU"
    done = subprocess.run(
        [sys.executable, *command, str(PROGRAM), *options],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environment,
        timeout=540,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :])


def test_outside_a_launch_is_torch_xlas_world_of_one() -> None:
    native = run()
    emulated = run("-m", "xlasim", "run", "--devices", "1")
    assert emulated == native
    assert native["world_size"] == 1 and native["rendezvous"] == ["mine"]
    assert native["process_group"] == {"rank": 0, "size": 1, "sum": [0.0, 1.0, 2.0, 3.0]}
    assert native["warnings"] == []


def test_on_a_slice_of_several_cores_it_warns_once_per_call() -> None:
    emulated = run(
        "-m", "xlasim", "run", "--devices", "2", "--processes", "1",
        options=("--collectives-only",),
    )  # fmt: skip
    warned = [w.split(" at ")[0] for w in emulated.pop("warnings")]
    # mesh_reduce is torch_xla's own code, which calls xm.rendezvous
    assert warned == ["xm.all_reduce", "xm.all_gather", "xm.rendezvous", "xm.rendezvous"]
    assert emulated["world_size"] == 1 and emulated["rendezvous"] == ["mine"]
