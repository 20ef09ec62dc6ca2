"""A script on emulated cores exits with its own status, whatever its ranks were doing.

A rank thread still inside XLA's native code when the interpreter finalizes aborts the process
("terminate called without an active exception", exit 134) after the script's work is done: a
CI job would go red at random. Here a rank is stuck in a loop of XLA executions when its run
times out, and the script then exits.
"""

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import sys
    import torch, torch_xla
    import torch_xla.core.xla_model as xm
    import xlasim

    def fn(index):
        value = torch.ones(4, device=torch_xla.device())
        if index == 3:
            while True:  # never reaches the collective: stuck inside XLA executions
                value = value * 1.0001
                torch_xla.sync()
        xm.all_reduce(xm.REDUCE_SUM, value)

    if __name__ == "__main__":
        xlasim.emulate(devices=8)
        try:
            torch_xla.launch(fn)
        except xlasim.CollectiveTimeoutError:
            print("timed out as expected")
        sys.exit(int(sys.argv[1]))
    """
)


@pytest.mark.parametrize("status", [0, 3])
def test_a_stuck_rank_does_not_abort_the_exit(tmp_path, status):
    script = tmp_path / "stuck.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), str(status)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**_environment(), "XLASIM_TIMEOUT": "2"},
    )
    assert "timed out as expected" in done.stdout, done.stderr
    assert "terminate called" not in done.stderr
    assert done.returncode == status, done.stderr[-2000:]


def _environment() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("XLASIM_", "PJRT_", "CPU_"))}
