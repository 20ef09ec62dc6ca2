"""Lines printed by ranks reach the terminal whole and in each rank's order, in every mode.

`print` writes each piece of a line and then the newline; a TPU VM's processes flush each line
to the terminal whole. Here ranks that are worker processes write to the same terminal, and
ranks that are threads to the same stream: an emulated rank's output must not be cut between
its pieces ("HWHW TPU" was seen, two ranks' pieces in one line). Run under a pseudo-terminal,
where the workers' streams are unbuffered (pipes hide it: they are block-buffered)."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

PROGRAM = Path(__file__).with_name("printing_program.py")
LINES = 40
OUT = re.compile(rf"^line (\d+) (\d+) of {LINES} from rank (\d+)$")
ERR = re.compile(r"^err (\d+) (\d+) on stderr$")
BOUND_S = 300


def on_a_terminal(command: list[str]) -> str:
    """What `command` writes to a pseudo-terminal (stdout and stderr both), bounded."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(command, stdout=follower, stderr=follower, stdin=subprocess.DEVNULL)
    os.close(follower)
    chunks, deadline = [], time.monotonic() + BOUND_S
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 1.0)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        else:
            pytest.fail(f"{command} still running after {BOUND_S} s")
    finally:
        os.close(leader)
        if process.poll() is None:
            process.kill()
        process.wait(timeout=60)
    assert process.returncode == 0, b"".join(chunks).decode(errors="replace")[-3000:]
    return b"".join(chunks).decode().replace("\r\n", "\n")


@pytest.mark.parametrize(
    "shape",
    [
        ["--devices", "8"],
        ["--devices", "8", "--processes", "1"],
        ["--devices", "8", "--hosts", "2"],
    ],
    ids=["isolated", "threads", "two-hosts"],
)
def test_every_rank_line_arrives_whole_and_in_the_ranks_order(shape):
    text = on_a_terminal([sys.executable, "-m", "xlasim", "run", *shape, str(PROGRAM)])
    printed, errors = defaultdict(list), defaultdict(list)
    for line in text.splitlines():
        if line.startswith(("line", "err")) or " line " in line or "err " in line:
            out, err = OUT.match(line), ERR.match(line)
            assert out or err, f"a torn line: {line!r}"
            if out:
                assert out.group(1) == out.group(3), line
                printed[int(out.group(1))].append(int(out.group(2)))
            else:
                errors[int(err.group(1))].append(int(err.group(2)))
    assert sorted(printed) == list(range(8)), sorted(printed)
    for rank, numbers in printed.items():
        assert numbers == list(range(LINES)), f"rank {rank}: {numbers}"
        assert errors[rank] == list(range(0, LINES, 8)), f"rank {rank}: {errors[rank]}"
