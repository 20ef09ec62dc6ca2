"""An SPMD script under `xlasim run` gets torch_xla's own answers where SPMD changes them."""

import subprocess
import sys

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


def test_xla_process_group_is_refused_under_spmd(tmp_path) -> None:
    """torch_xla refuses the xla backend in an SPMD program (its test/spmd expects exactly this
    AssertionError); outside a rank xlasim would otherwise say OutsideWorldError first."""
    script = tmp_path / "spmd_script.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, "-m", "xlasim", "run", "--devices", "2", "--processes", "1", str(script)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused: XLA backend is not supported with SPMD" in done.stdout
