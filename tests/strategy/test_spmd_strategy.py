"""The reference strategy's FSDPv2 (SPMD) mode, as the README runs it:
`python -m strategy.demo --devices 8 --spmd`."""

import re

from test_strategy_demo import STEP_LINE, run_demo


def test_spmd_demo_trains_on_8_cores_checkpoints_resumes_and_the_loss_falls(emulation_only):
    # A subprocess: SPMD mode is process-wide and irreversible, never for this session.
    out = run_demo("--devices", "8", "--spmd", "--steps", "8")
    assert "FSDPv2 (SPMD) training on 8 XLA core(s)" in out
    steps = [(int(s), int(total), float(loss)) for s, total, loss in STEP_LINE.findall(out)]
    assert [s for s, _, _ in steps] == list(range(1, 17))  # one program: one line per step
    # the checkpoint is a torch.distributed.checkpoint directory, sized by its files
    assert re.search(r"^saved \S+last\.ckpt \(\d+ bytes\)$", out, re.M)
    assert re.search(r"^resumed from \S+last\.ckpt at step 8$", out, re.M)
    assert out.index("saved") < out.index("resumed from") < out.index("step  9/16")
    losses = [loss for _, _, loss in steps]
    assert sum(losses[-4:]) < 0.85 * sum(losses[:4])  # falling
    assert "weights still tied: True" in out
    assert "the loss fell" in out
