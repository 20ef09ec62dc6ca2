"""The native executor with more than one rank, on any CPU.

On CPU the real `xmp.spawn` starts one process whose device threads cannot finish a collective
(../shared/xla-notes.md), so the native backend's own CI run has one device. Here the inner
session runs `--xla-backend=native` with a conftest that emulates 2 cores first: `xmp.spawn` is
then xlasim's, and it starts the native executor's 2 workers as emulated ranks in processes of
their own. Everything of the native backend above `xmp.spawn` is the TPU VM's code (worker
start and connection, pickled jobs, per-rank outcomes, a hang's stacks, killing and restarting
the workers); the collectives and the runtime below it are the emulator's. See
docs/pytest-plugin.md, "What the native run on one CPU device proves".
"""

import re
from pathlib import Path

import pytest

HERE = Path(__file__).parent
_SUMMARY = re.compile(r"^(PASSED|FAILED|SKIPPED) \S*?::(\S+)")


def outcomes(result: pytest.RunResult) -> dict[str, str]:
    """Each inner test's outcome by name, from the `-rA` short summary."""
    return {m.group(2): m.group(1) for line in result.outlines if (m := _SUMMARY.match(line))}


CONFTEST = """
import xlasim

# Before the plugin starts the native backend's workers (at session start): xmp.spawn becomes
# the emulated one, 2 cores, a worker process each.
xlasim.emulate(devices=2, processes=2)
"""


def test_native_executor_over_an_emulated_world(pytester, inner_environment) -> None:
    inner_environment.setenv("PJRT_DEVICE", "CPU")
    inner_environment.setenv("CPU_NUM_DEVICES", "2")  # what the native backend counts here
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_inner=(HERE / "inner_native_emulated.py").read_text())
    result = pytester.runpytest_subprocess(
        "-rA", "-p", "no:cacheprovider", "--xla-backend=native", timeout=600
    )
    assert outcomes(result) == {
        "test_collective_across_workers": "PASSED",
        "test_both_ranks_fail_alike": "FAILED",
        "test_rank_one_fails": "FAILED",
        "test_world_run": "PASSED",
        "test_one_rank_hangs": "FAILED",
        "test_after_the_hang": "PASSED",
    }, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "xlasim: backend native, 2 XLA devices (CPU via xmp.spawn, warm worker processes)*",
            "xlasim: 1 test will skip for this slice's size (2 cores): 1 runs on a sub-world of "
            "1 core",
            # Failures rendered in the workers by pytest's own code; alike ranks share a section.
            "*- [[]ranks 0-1 of 2[]] -*",
            "E       ValueError: on every rank",
            "*- [[]rank 1/2[]] -*",
            "E *KeyError: 'rank one'",
            # A hang: every worker's stack, then fresh workers for the next test.
            "*CollectiveTimeoutError: the run did not finish within 5 s*killed and are started "
            "again*",
            "--- rank 0 (pid *)",
            "--- rank 1 (pid *)",
            '*File "*test_inner.py", line * in test_one_rank_hangs',
            "SKIPPED [[]1[]] test_inner.py:*: not on this slice",
            "SKIPPED [[]1[]] test_inner.py:*: runs on a sub-world of 1 core; the native backend "
            "runs every one of its 2 cores",
        ]
    )
    text = result.stdout.str()
    for rank in range(2):
        assert f"[rank {rank}/2] worker " in text  # each rank's output, tagged
