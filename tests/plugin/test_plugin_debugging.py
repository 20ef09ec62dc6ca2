"""pdb in a rank at the user's terminal (docs/debugging.md), driven through a real
pseudo-terminal: `pytest --pdb`, `--trace`, `breakpoint()` and `xlasim run`, at 8 cores in the
default mode (one worker process per core), as a person would type.

Each test starts a pytest (or `xlasim run`) process in a pty with pexpect, answers its prompts,
and checks what came back; the processes the session started (its worker processes and their
zygote) are listed while a rank is stopped and must all be gone once the session ends, after
`q`, `c` or Ctrl-C.
"""

from __future__ import annotations

import ctypes
import io
import os
import signal
import sys
import time
from pathlib import Path

import pexpect
import psutil
import pytest

import xlasim

REPO = Path(xlasim.__file__).resolve().parents[1]
PROMPT = r"\(Pdb rank (\d+)/(\d+)\) "

TESTS = """
import pdb

import pytest
import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr


def total_of_ranks():
    rank = torch.tensor([float(xr.global_ordinal())], device=torch_xla.device())
    return xm.all_reduce(xm.REDUCE_SUM, rank).item()


@pytest.mark.xla
def test_fails_on_rank_5():
    secret = xr.global_ordinal() * 10
    assert secret != 50


@pytest.mark.xla
def test_stops_on_rank_3():
    secret = xr.global_ordinal() * 10
    if secret == 30:
        breakpoint()
    n = xr.world_size()
    assert total_of_ranks() == n * (n - 1) / 2


@pytest.mark.xla
def test_stops_on_ranks_2_and_5():
    mine = f"local of rank {xr.global_ordinal()}"
    if xr.global_ordinal() in (2, 5):
        pdb.set_trace()
    n = xr.world_size()
    assert mine and total_of_ranks() == n * (n - 1) / 2


@pytest.mark.xla(devices=2)
def test_traced():
    first = xr.global_ordinal() + 100
    assert first >= 100
"""

SCRIPT = """
import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_multiprocessing as xmp
import torch_xla.runtime as xr


def train(index):
    secret = xr.global_ordinal() * 10
    if secret == 30:
        breakpoint()
    rank = torch.tensor([float(xr.global_ordinal())], device=torch_xla.device())
    print(f"rank {xr.global_ordinal()}: sum of ranks {xm.all_reduce(xm.REDUCE_SUM, rank).item()}")


if __name__ == "__main__":
    xmp.spawn(train)
"""


class Terminal:
    """A command in a pseudo-terminal, and every process it started (while they ran)."""

    def __init__(self, command: list[str], cwd: Path, **variables: str):
        environment = {k: v for k, v in os.environ.items() if not k.startswith("XLASIM_")}
        environment.pop("PYTEST_XDIST_WORKER", None)
        environment.update(PYTHONPATH=str(REPO), COLUMNS="100", LINES="40", **variables)
        self.transcript = io.StringIO()
        self.child = pexpect.spawn(
            command[0],
            command[1:],
            cwd=str(cwd),
            env=environment,
            encoding="utf-8",
            timeout=240,
            dimensions=(40, 100),
        )
        self.child.logfile_read = self.transcript
        self.started: dict[int, float] = {}

    def prompt(self) -> str:
        """Wait for a rank's prompt; the rank it names. The session's processes are noted."""
        self.child.expect(PROMPT)
        self._note_processes()
        return self.child.match.group(1)

    def answer(self, line: str) -> str:
        """Type `line` at the prompt; what the debugger printed before its next prompt."""
        self.child.sendline(line)
        self.child.expect(PROMPT)
        return self.child.before

    def ends(self) -> int:
        """Wait for the command to end; its exit status, and no process of it left."""
        self.child.expect(pexpect.EOF)
        self.child.close()
        deadline = time.monotonic() + 10
        while self._left() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not self._left(), f"processes left behind: {self._left()}"
        assert len(self.started) > 8  # pytest (or xlasim), the zygote, 8 workers at least
        return (
            self.child.exitstatus if self.child.exitstatus is not None else -self.child.signalstatus
        )

    def interrupt_another_thread(self) -> None:
        """SIGINT to one of the command's threads other than its main one (one that does not
        block it), as the kernel may choose for a Ctrl-C."""
        pid = self.child.pid
        for tid in sorted(int(t) for t in os.listdir(f"/proc/{pid}/task")):
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
            blocked = int(status.split("SigBlk:")[1].split()[0], 16)
            if tid != pid and not blocked & (1 << (signal.SIGINT - 1)):
                assert ctypes.CDLL(None, use_errno=True).tgkill(pid, tid, signal.SIGINT) == 0
                return
        raise AssertionError("no other thread of the command takes SIGINT")

    @property
    def text(self) -> str:
        return self.transcript.getvalue().replace("\r\n", "\n")

    def _note_processes(self) -> None:
        root = psutil.Process(self.child.pid)
        for process in [root, *root.children(recursive=True)]:
            self.started.setdefault(process.pid, process.create_time())

    def _left(self) -> list[int]:
        left = []
        for pid, created in self.started.items():
            try:
                process = psutil.Process(pid)
                if process.create_time() == created and process.status() != psutil.STATUS_ZOMBIE:
                    left.append(pid)
            except psutil.NoSuchProcess:
                pass
        return left


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "test_ranks.py").write_text(TESTS)
    (tmp_path / "train.py").write_text(SCRIPT)
    return tmp_path


def pytest_in_a_terminal(project: Path, *args: str, **variables: str) -> Terminal:
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--color=no", *args]
    return Terminal(command, project, **variables)


def test_pdb_opens_in_the_failing_rank_and_q_ends_the_session(project):
    terminal = pytest_in_a_terminal(project, "--xla-devices=8", "--pdb", "test_ranks.py")
    assert terminal.prompt() == "5"
    assert terminal.answer("p secret").strip().splitlines()[-1] == "50"
    listed = terminal.answer("l")
    assert " 19  ->\t    assert secret != 50" in listed  # pdb marks the current line
    terminal.child.sendline("interact")
    terminal.child.expect(">>> ")
    terminal.child.sendline("secret + 1")
    terminal.child.expect(">>> ")
    assert terminal.child.before.strip().splitlines()[-1] == "51"
    terminal.child.sendeof()
    terminal.prompt()
    terminal.child.sendline("q")
    assert terminal.ends() == 2  # pytest's "interrupted", as after its own debugger's q
    text = terminal.text
    assert "PDB post_mortem (rank 5/8) (IO-capturing turned off)" in text
    assert 'test_ranks.py", line 19, in test_fails_on_rank_5' in text  # the rank's traceback
    assert "FAILED test_ranks.py::test_fails_on_rank_5 - [rank 5/8] AssertionError" in text
    assert "Exit: Quitting debugger" in text
    # The session ended at q: the next tests (rank 3's breakpoint) never ran; their names
    # are in `l`'s listing, so what is looked for is their debugger and their outcome.
    assert "PDB set_trace" not in text and "passed" not in text


def test_breakpoints_stop_their_ranks_in_turn_and_no_bound_fires_meanwhile(project):
    # The collective bound is 2 s and the test's own 4 s; rank 3 is held 7 s, its peers wait
    # in the all_reduce for it all along.
    terminal = pytest_in_a_terminal(
        project, "--xla-devices=8", "--xla-timeout=4", "-k", "stops", XLASIM_TIMEOUT="2"
    )
    assert terminal.prompt() == "3"
    assert terminal.answer("p secret").strip().splitlines()[-1] == "30"
    time.sleep(7)
    terminal.child.sendline("c")
    first = terminal.prompt()
    assert terminal.answer("p mine").strip().splitlines()[-1] == f"'local of rank {first}'"
    terminal.child.sendline("c")
    second = terminal.prompt()
    assert {first, second} == {"2", "5"}
    assert terminal.answer("p mine").strip().splitlines()[-1] == f"'local of rank {second}'"
    terminal.child.sendline("c")
    assert terminal.ends() == 0
    assert "2 passed" in terminal.text
    assert "PDB set_trace (rank 3/8) (IO-capturing turned off)" in terminal.text
    assert "PDB continue (rank 3/8) (IO-capturing resumed)" in terminal.text


@pytest.mark.parametrize("delivered", ["to the terminal", "to another thread"])
def test_ctrl_c_at_a_rank_prompt_ends_the_session_cleanly(project, delivered):
    # The kernel gives a process's SIGINT to any thread not blocking it: the prompt must end
    # whichever thread of the pytest process took it (xlasim/reports/ctrl_c_relay.py).
    terminal = pytest_in_a_terminal(project, "--xla-devices=8", "-k", "rank_3")
    assert terminal.prompt() == "3"
    if delivered == "to the terminal":
        terminal.child.sendintr()
    else:
        terminal.interrupt_another_thread()
    assert terminal.ends() == 2
    assert "Exit: KeyboardInterrupt at the debugger prompt of rank 3/8" in terminal.text
    assert "Traceback" not in terminal.text


def test_trace_starts_every_rank_of_the_test_under_pdb(project):
    terminal = pytest_in_a_terminal(project, "--xla-devices=8", "--trace", "-k", "traced")
    ranks = []
    for _ in range(2):  # a 2-rank sub-world
        ranks.append(terminal.prompt())
        shown = terminal.answer("n")
        assert "-> assert first >= 100" in shown
        assert terminal.answer("p first").strip().splitlines()[-1] == str(100 + int(ranks[-1]))
        terminal.child.sendline("c")
    assert sorted(ranks) == ["0", "1"]
    assert terminal.ends() == 0
    assert "1 passed" in terminal.text


def test_a_breakpoint_in_an_xlasim_run_script(project):
    terminal = Terminal([sys.executable, "-m", "xlasim", "run", "train.py"], project)
    assert terminal.prompt() == "3"
    assert terminal.answer("p secret").strip().splitlines()[-1] == "30"
    terminal.child.sendline("c")
    assert terminal.ends() == 0
    assert terminal.text.count("sum of ranks 28.0") == 8
