"""Pods only members enter (docs/pods.md, "Threat model"): a host on the pod's network that
reaches machine 0's rendezvous but lacks the token, each machine a network namespace.

- A host without the token tries to join with a wrong token, sends garbage to the rendezvous, and, knowing xlasim's
  code and every key it can read, tries to register in the pod's gloo group as machine 1, to
  post machine 1's failure notice for every launch and to fill the ranks' `xm` mailboxes with
  messages of its own: the pod's run is what one machine computes, no machine heard of it but
  machine 0's refusal, and the intruder says it got nowhere.
- A member that declares a negative or an oversized length for its messages is refused by the
  other machine before it allocates anything, naming the machine and the length; both end.

Slow (a pod of 2 machines and the same slice on one: ~30-60 s on 2 loaded cores): `-m slow`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fixtures.namespaces import wait_succeeded
from fixtures.pod_runs import XLASIM, pod_options, rank_lines, start_here

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).parent / "scripts"
COLLECTIVES = SCRIPTS / "collectives.py"
INTRUDER = SCRIPTS / "intruder.py"
ROGUE = SCRIPTS / "rogue_member.py"
#: 4 cores, a process each, on 2 hosts: machine 0 holds ranks 0-1, machine 1 ranks 2-3.
SLICE = ["--devices", "4", "--processes", "4", "--hosts", "2"]
#: collectives.py's launches, and the channels of its ring of xm.send/recv (100 + rank).
LAUNCHES = 2
CHANNELS = [100, 101, 102, 103]
TOKEN = "pod-members-token"
PORT = 29770
RUN_BOUND_S = 300
TIMEOUT_S = "60"


def test_a_host_without_the_token_enters_nothing_and_the_pod_runs_on(machines, tmp_path):
    pod = machines(3)  # machine 2 is the intruder's host
    reference = start_here([*XLASIM, *SLICE, str(COLLECTIVES)], tmp_path / "one")

    def xlasim_on(machine: int, rank: int, token: str, output: str) -> subprocess.Popen:
        return pod.start(
            machine,
            [*XLASIM, *SLICE, *pod_options(pod, rank, 2, PORT, token), str(COLLECTIVES)],
            tmp_path / output,
            XLASIM_TIMEOUT=TIMEOUT_S,
        )

    first = xlasim_on(0, 0, TOKEN, "m0")
    intruder = pod.start(
        2,
        [sys.executable, str(INTRUDER), str(LAUNCHES), *map(str, CHANNELS)],
        tmp_path / "intruder",
        TARGET=f"{pod.address(0)}:{PORT}",
        PYTHONPATH=str(REPO),
    )
    _wait_for_line(intruder, tmp_path / "intruder", "gloo: trying")  # every attack is under way
    wrong_token = xlasim_on(2, 1, "not-the-token", "wrong")
    wrong_token.wait(RUN_BOUND_S)
    wrong_err = (tmp_path / "wrong.err").read_text()
    assert wrong_token.returncode != 0
    assert "PodJoinError" in wrong_err and "does not know this pod's token" in wrong_err
    garbage = subprocess.run(
        ["ip", "netns", "exec", pod.names[2], sys.executable, "-c", _SEND_GARBAGE],
        env={**os.environ, "TARGET": f"{pod.address(0)}:{PORT}"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert garbage.returncode == 0, garbage.stderr
    second = xlasim_on(1, 1, TOKEN, "m1")
    for rank, process in enumerate([first, second]):
        wait_succeeded(process, tmp_path / f"m{rank}", RUN_BOUND_S)
    wait_succeeded(reference, tmp_path / "one", RUN_BOUND_S)
    assert rank_lines(tmp_path / "m0.out", tmp_path / "m1.out") == rank_lines(tmp_path / "one.out")
    errors = [(tmp_path / f"m{rank}.err").read_text() for rank in range(2)]
    assert "refused join ticket 1: a machine claiming rank 1 showed a wrong token" in errors[0]
    assert not any("INTRUDER" in err for err in errors), errors
    said = (tmp_path / "intruder.out").read_text()
    assert "notice: posted" in said and f"mailbox: posted {LAUNCHES * len(CHANNELS)}" in said
    assert "gloo: trying as machine 1" in said and "entered" not in said, said


@pytest.mark.parametrize("declared", [-5, 2**62], ids=["negative", "oversized"])
def test_a_member_that_declares_a_wrong_length_is_refused_before_allocating(
    machines, tmp_path, declared
):
    pod = machines(2)
    options = [*SLICE, str(COLLECTIVES)]
    honest = pod.start(
        0,
        [*XLASIM, *pod_options(pod, 0, 2, PORT, TOKEN), *options],
        tmp_path / "m0",
        XLASIM_TIMEOUT=TIMEOUT_S,
    )
    rogue = pod.start(
        1,
        [sys.executable, str(ROGUE), "run", *pod_options(pod, 1, 2, PORT, TOKEN), *options],
        tmp_path / "m1",
        XLASIM_TIMEOUT=TIMEOUT_S,
        DECLARED=str(declared),
        PYTHONPATH=str(REPO),
    )
    for machine, process in enumerate([honest, rogue]):
        try:
            process.wait(RUN_BOUND_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"machine {machine} still ran {RUN_BOUND_S} s after it started")
        assert process.returncode != 0, f"machine {machine} passed"
    err = (tmp_path / "m0.err").read_text()
    assert (
        f"machine 1 (hosts 1, ranks 2-3) declared a message of {declared} bytes: refused before "
        "anything was allocated for it"
    ) in err, err[-3000:]


def _wait_for_line(process: subprocess.Popen, output: Path, line: str) -> None:
    deadline = time.monotonic() + RUN_BOUND_S
    while line not in Path(f"{output}.out").read_text():
        assert process.poll() is None, Path(f"{output}.err").read_text()[-3000:]
        assert time.monotonic() < deadline, f"{output} never said {line!r}"
        time.sleep(0.2)


#: A stray peer: connects to the rendezvous, sends random bytes, reads what comes back, leaves.
_SEND_GARBAGE = """
import os, socket, time
host, port = os.environ["TARGET"].rsplit(":", 1)
deadline = time.monotonic() + 50
while True:
    try:
        stray = socket.create_connection((host, int(port)), timeout=5)
        break
    except OSError:
        assert time.monotonic() < deadline, "the rendezvous never listened"
        time.sleep(0.2)
stray.sendall(os.urandom(4096) + b"\\x00" * 64)
stray.settimeout(2)
try:
    stray.recv(64)
except OSError:
    pass
stray.close()
"""
