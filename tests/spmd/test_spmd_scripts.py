"""An SPMD script under `xlasim run` gets torch_xla's own answers where SPMD changes them."""

import subprocess
import sys

import pytest

SCRIPT = """
import torch.distributed as dist
import torch_xla.distributed.xla_backend  # registers the xla backend
import torch_xla.runtime as xr

xr.use_spmd()
try:
    dist.init_process_group("xla", init_method="xla://")
except AssertionError as error:
    print("refused:", error)
"""


PLATFORM = """
import os

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr

xr.use_spmd()
print("hardware", xm.xla_device_hw(torch_xla.device()), "environment", os.environ["PJRT_DEVICE"],
      "devices", xr.global_runtime_device_count())
"""


def run_script(tmp_path, text: str, *options: str) -> subprocess.CompletedProcess:
    script = tmp_path / "spmd_script.py"
    script.write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "xlasim", "run", "--devices", "2", *options, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def test_xla_process_group_is_refused_under_spmd(tmp_path) -> None:
    """torch_xla refuses the xla backend in an SPMD program (its test/spmd expects exactly this
    AssertionError), not the group of 1 xlasim makes outside a rank of a replica program."""
    done = run_script(tmp_path, SCRIPT, "--processes", "1")
    assert "refused: XLA backend is not supported with SPMD" in done.stdout


@pytest.mark.parametrize("processes", ["1", "2"])
def test_the_environment_says_tpu_as_the_hardware_does(tmp_path, processes) -> None:
    """On a TPU VM `PJRT_DEVICE` is TPU; torch_xla's test/spmd compares it with
    `xm.xla_device_hw` (test_xla_spmd_python_api_interaction: 3 tests)."""
    done = run_script(tmp_path, PLATFORM, "--processes", processes)
    assert "hardware TPU environment TPU devices 2" in done.stdout, done.stdout
