"""A checkpoint writer killed mid-save: the old checkpoint stays whole, and the temporary file
it could not remove is removed by the next save of the same checkpoint."""

from __future__ import annotations

import os
import subprocess
import sys

import torch

from strategy.serialization import save_atomic

KILLED_MID_SAVE = """
import os, sys, torch
from strategy import serialization
path = sys.argv[1]
serialization.save_atomic({"w": torch.zeros(3)}, path)
os.fsync = lambda fd: os._exit(9)  # killed after writing, before the rename
serialization.save_atomic({"w": torch.ones(3)}, path)
"""


def _temporaries(directory):
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_the_next_save_removes_what_a_killed_writer_left(tmp_path):
    path = tmp_path / "model.ckpt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", KILLED_MID_SAVE, str(path)], env=env, timeout=120)
    assert done.returncode == 9
    assert len(_temporaries(tmp_path)) == 1  # what the killed writer left
    assert torch.load(path)["w"].sum() == 0  # the old checkpoint, whole
    live = tmp_path / f".model.ckpt.{_temporaries(tmp_path)[0].split('.')[3]}.{os.getpid()}.x.tmp"
    live.write_bytes(b"a live writer's")
    save_atomic({"w": torch.ones(3)}, path)
    assert _temporaries(tmp_path) == [live.name]  # a live writer's file is left alone
    assert torch.load(path)["w"].sum() == 3
