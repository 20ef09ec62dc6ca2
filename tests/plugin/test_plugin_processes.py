"""The plugin in multi-process topologies: ranks in the core's worker processes.

One inner session (inner_processes.py) on 8 cores in 4 worker processes on 2 emulated hosts:
test bodies and `xla_world.run` functions are pickled to the workers, which import the test
module from its path; the report must read as in the threaded world.
"""


def test_multi_process_session(run_inner) -> None:
    result, got = run_inner(
        "inner_processes.py", "--xla-devices=8", "--xla-processes=4", "--xla-hosts=2"
    )
    expected = {
        "test_ranks_in_worker_processes": "PASSED",
        "TestInAClass::test_method_on_a_sub_world[3]": "PASSED",
        "test_rank_3_fails": "FAILED",
        "test_one_rank_skips": "FAILED",
        "test_xfail_on_a_rank": "XFAIL",
        "test_unpicklable_fixture": "FAILED",
        "test_hangs": "FAILED",
        "test_after_the_hang": "PASSED",
        "test_hypothesis_through_world": "PASSED",
        "test_hosts_have_their_own_directories": "PASSED",
        "test_lambda_is_refused": "FAILED",
        "test_world_run_failure": "FAILED",
        "test_recompiling_loop": "FAILED",
        "test_fallbacks_counted": "FAILED",
    }
    assert {name: got.get(name) for name in expected} == expected, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "xlasim: backend emulated, 8 XLA devices (2 hosts x 2 processes x 2 cores = 8 cores)*",
            # Every rank skipped: a plain skip, at the test's line (its frames stayed remote).
            "SKIPPED [[]1[]] test_inner.py:*: not on this slice",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            # The failing rank's section: pytest's rendering, made in the worker process.
            "*_ test_rank_3_fails _*",
            "[[]rank 3/4[]] AssertionError: rank three is broken",
            "*- [[]rank 3/4[]] -*",
            '>       assert xla_rank.rank != 3, "rank three is broken"',
            "E       AssertionError: rank three is broken",
            "test_inner.py:*: AssertionError",
            "*- [[]rank 3/4[]] captured stdout -*",
            "rank 3 says hello",
            "*- Captured stdout call -*",
            "[[]rank 0/4[]] rank 0 says hello",
            "*_ test_one_rank_skips _*",
            "*InconsistentOutcomeError: ranks disagree*",
            "  rank 0: skipped (only rank 0 leaves)",
            "  ranks 1-3: released from a collective wait*",
            # Fixture values are pickled to the ranks; one that cannot be is named.
            "*_ test_unpicklable_fixture _*",
            "*XlasimError: fixture 'lock' (lock) cannot be sent to the ranks: this session's "
            "ranks live in worker processes (2 hosts x 2 processes x 2 cores = 8 cores)*",
            # A hang in a worker process: where every rank was; then the next test passes.
            "*_ test_hangs _*",
            "*CollectiveTimeoutError: the run did not finish within 2 s*",
            "--- rank 3 never arrived; it is running at *test_inner.py:* in test_hangs",
            "*threading.Event().wait()*",
            "--- ranks 0-2 wait in all_reduce*",
            "*_ test_lambda_is_refused _*",
            "*NotPicklableError: this session's ranks live in worker processes*"
            "<lambda> (a lambda or a function defined inside another one: make it a "
            "module-level function)*",
            "*_ test_world_run_failure _*",
            "[[]rank 5/8[]] AssertionError*",
            ">       assert xr.global_ordinal() != 5",
            "E       assert 5 != 5",  # rewritten in the worker
            # XLA counters come back from the worker processes.
            "*_ test_recompiling_loop _*",
            "*@pytest.mark.xla_metrics: XLA performance bound exceeded: 3 graphs compiled, bound 1*",
            "*_ test_fallbacks_counted _*",
            "*4 CPU fallbacks (aten::nonzero x4), bound 0*",
            # Passing ranks' output, tagged, from every process.
            "*_ test_ranks_in_worker_processes _*",
            "[[]rank 0/8[]] rank 0 in process 0",
            "*",
            "[[]rank 7/8[]] rank 7 in process 3",
        ]
    )
    assert "[rank 0/4] -" not in result.stdout.str()  # passing ranks get no failure section


NESTED = """
import pytest
import torch_xla.runtime as xr
from dataclasses import dataclass


@dataclass
class Box:
    value: int


@pytest.fixture
def box():
    return Box(3)


@pytest.mark.xla
def test_body_in_a_worker(xla_rank, box):
    assert __name__ == "sub.deeper.test_nested"  # the parent's name for this module
    assert box == Box(3) and xr.world_size() == 2  # this module's Box, unpickled in a worker


def ordinal_times(box):
    return box.value * xr.global_ordinal()


def test_world_run(xla_world, box):
    assert xla_world.run(ordinal_times, box) == [0, 3]


@pytest.mark.xla
def test_rewritten(xla_rank):
    values = [1, xla_rank.rank]
    assert values == [1, 3]
"""


def test_importlib_mode_and_nested_directories(run_inner, pytester) -> None:
    """pytest's importlib mode names modules after their directories, which are no packages:
    the workers import the file under that name, making up the parents as pytest does."""
    pytester.makepyfile(**{"sub/deeper/test_nested": NESTED})
    result = pytester.runpytest_subprocess(
        "-rA",
        "-p",
        "no:cacheprovider",
        "--import-mode=importlib",
        "--xla-devices=2",
        "--xla-processes=2",
        timeout=300,
    )
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "[[]rank 0/2[]] AssertionError: assert [[]1, 0[]] == [[]1, 3[]]*",
            ">       assert values == [[]1, 3[]]",
            "E       assert [[]1, 0[]] == [[]1, 3[]]",
            "sub/deeper/test_nested.py:*: AssertionError",
        ]
    )
