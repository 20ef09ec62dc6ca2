"""A launching script's own mistakes, named in one line that says what to do: a launch at the
top of the script instead of under `if __name__ == "__main__":` (workers import the script), and a
temporary directory too long for the worker zygote's Unix socket."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = """\
import xlasim
import torch_xla.distributed.xla_multiprocessing as xmp

def train(index):
    pass

xlasim.emulate(devices=2)
xmp.spawn(train)
"""
BOUND_S = 90


def _launch(tmp_path, tmpdir):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLASIM_", "PJRT_", "CPU_NUM"))}
    env.update(TMPDIR=str(tmpdir), PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=BOUND_S
    )


@pytest.mark.slow
def test_a_launch_outside_the_main_guard_says_where_to_put_it(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = _launch(tmp_path, scratch)
    assert done.returncode == 1
    assert 'Put the launch under `if __name__ == "__main__":`' in done.stderr
    assert "died while starting" not in done.stderr
    assert list(scratch.iterdir()) == []


def test_a_temporary_directory_too_long_for_a_socket_is_named(tmp_path):
    long = tmp_path / ("d" * 60) / ("e" * 60)
    long.mkdir(parents=True)
    done = _launch(tmp_path, long)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("xlasim.XlasimError: the temporary directory"), last
    assert "set TMPDIR to a shorter directory" in last
    assert list(long.iterdir()) == []
