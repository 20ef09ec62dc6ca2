"""One identity in every entry point: an SPMD program over an emulated preset sees the same
slice as a script (`xlasim run --topology NAME`, the script calling `xr.use_spmd()`) as through
`xlasim.spmd.start_world` (the plugin's SPMD worker): one process holding the whole pod's
devices, every runtime query, device attribute, TPU metadata and mesh alike, on every preset.
Before issue 23 a script on `2xv5e-8` saw 16 device attributes but 8 devices, and
`xs.HybridMesh` raised "Number of device IDs (16) must match the global number of devices (8)".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from xlasim.base.topology import PRESETS

PROBE = Path(__file__).with_name("identity_probe.py")
ROOT = PROBE.parents[2]


def _start(*args: str) -> subprocess.Popen:
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("XLASIM_", "PJRT_DEVICE", "CPU_NUM_DEVICES", "XLA_USE_SPMD"))
    }
    return subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=environment,
    )


def _result(process: subprocess.Popen) -> dict:
    out, err = process.communicate(timeout=540)
    assert process.returncode == 0, err[-3000:]
    line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :])


#: The presets CI runs this for: one host, several hosts, 2 cores a chip, two slices, no TPU;
#: the others are `extended` (13 s each; docs/testing.md, "CI").
IN_CI = ("v5e-8", "v4-16", "v3-32", "2xv5e-8", "cpu-8")


@pytest.mark.parametrize(
    "name",
    [n if n in IN_CI else pytest.param(n, marks=pytest.mark.extended) for n in PRESETS],
)
def test_a_script_sees_the_pod_the_plugin_sees(name: str) -> None:
    script = _start("-m", "xlasim", "run", "--topology", name, str(PROBE))
    world = _start(str(PROBE), "--start-world", name)
    in_script, in_world = _result(script), _result(world)

    assert in_script == in_world
    pod, _ = PRESETS[name]
    assert in_script["global_runtime_device_count"] == pod.devices
    assert len(in_script["attributes"]) == pod.devices
    assert sorted(in_script["mesh"]) == list(range(pod.devices))
    assert in_script["hosts"] == list(range(pod.hosts))
    assert in_script["PJRT_DEVICE"] == in_script["hardware"] == "TPU"
