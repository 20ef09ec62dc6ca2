"""An abandoned rank thread blocked in C code is left uninterrupted while this process is
traced (xlasim/ranks/threads.py `_traced`): on CPython 3.11 the pending exception made every
traced thread loop for good at its next function call (pytest-cov in the threads mode hung in
`ThreadRanks.recover`). Checked in a fresh interpreter, bounded: a regression is a timeout."""

import subprocess
import sys

PROGRAM = """
import sys, time
from xlasim.ranks.threads import RankThread

def called():
    return "returned"

sys.settrace(lambda *args: None)  # a tracer, as coverage.py's or a debugger's
idle = RankThread(0, "xla:0")  # blocked in C: waiting on its empty job queue
time.sleep(0.2)
idle.interrupt()
print(called())
"""


def test_a_traced_process_goes_on_after_interrupting_a_blocked_rank() -> None:
    """The main thread, traced, calls a function after interrupting an idle rank thread."""
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=30
    )  # the spin, when it comes back, raises TimeoutExpired here
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "returned"
