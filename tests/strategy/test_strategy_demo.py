"""The main job, as the README runs it: `python -m strategy.demo --devices 8`."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: What emulation set in this process; the demo starts as on a fresh CPU machine.
ENVIRONMENT_OF_THIS_SESSION = ("PJRT_DEVICE", "CPU_NUM_DEVICES", "XLASIM_DEVICES")
STEP_LINE = re.compile(r"^epoch \d+ \| step +(\d+)/(\d+) \[[#.]+\] loss (\d+\.\d+)", re.M)


def run_demo(*args: str) -> str:
    """The demo's output, run as the README runs it (a fresh process, 300 s bound); it must
    exit 0."""
    env = {k: v for k, v in os.environ.items() if k not in ENVIRONMENT_OF_THIS_SESSION}
    done = subprocess.run(
        [sys.executable, "-m", "strategy.demo", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_demo_trains_on_8_cores_checkpoints_resumes_and_the_loss_falls(emulation_only):
    out = run_demo("--devices", "8")
    assert "data-parallel training on 8 XLA core(s)" in out
    steps = [(int(s), int(total), float(loss)) for s, total, loss in STEP_LINE.findall(out)]
    # one line per step, printed by global rank 0 alone (8 ranks printing would repeat each)
    assert [s for s, _, _ in steps] == list(range(1, 33))
    assert re.search(r"^saved \S+last\.ckpt \(\d+ bytes\)$", out, re.M)
    assert re.search(r"^resumed from \S+last\.ckpt at step 16$", out, re.M)
    assert out.index("saved") < out.index("resumed from") < out.index("step 17/32")
    losses = [loss for _, _, loss in steps]
    assert sum(losses[-4:]) < 0.75 * sum(losses[:4])  # falling
    assert "weights still tied: True" in out
    assert "the loss fell" in out
