"""pytest's everyday options on tests whose body runs on ranks (issue 33 item 5), in the
default mode (a process per core): `-x`, `--lf`, `--sw`, `--durations`, `--junitxml` (the
failing rank and its traceback in the XML) and pytest-timeout's `--timeout` (every rank's stack,
the world reused after)."""

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest


def run_habits(run_inner, *args: str) -> tuple[pytest.RunResult, dict[str, str]]:
    """inner_habits.py on 2 cores in the default mode, with pytest's cache (`--lf`, `--sw`)."""
    return run_inner("inner_habits.py", "--xla-devices=2", *args, cache=True)


def test_exitfirst(run_inner) -> None:
    result, got = run_habits(run_inner, "-x")
    assert got == {"test_passes": "PASSED", "test_fails_on_rank_1": "FAILED"}, result.stdout.str()


@pytest.mark.slow
def test_timeout_junitxml_durations(run_inner, pytester: pytest.Pytester) -> None:
    result, got = run_habits(run_inner, "--timeout=4", "--junitxml=junit.xml", "--durations=0")
    assert got == {
        "test_passes": "PASSED",
        "test_fails_on_rank_1": "FAILED",
        "test_hangs_on_rank_0": "FAILED",
        "test_after_the_hang": "PASSED",  # the world is reused after the hang
    }, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            # pytest-timeout's bound, enforced by the world: where every rank was.
            "*_ test_hangs_on_rank_0 _*",
            "*CollectiveTimeoutError: the run did not finish within 4 s*",
            "--- rank 0 never arrived; it is running at *test_inner.py:* in test_hangs_on_rank_0",
            "*threading.Event().wait()*",
            "--- rank 1 returned from the function",
            # --durations: each marked test's call timed as a plain test's.
            "*slowest durations*",
        ]
    )
    assert "call     test_inner.py::test_hangs_on_rank_0" in result.stdout.str()
    cases = {
        case.get("name"): case
        for case in ET.parse(Path(pytester.path, "junit.xml")).iter("testcase")
    }
    failure = cases["test_fails_on_rank_1"].find("failure")
    assert failure is not None
    assert "rank 1" in failure.get("message", "")
    assert "assert xla_rank.rank != 1" in (failure.text or "")
    assert "rank one is broken (10)" in (failure.text or "")
    assert cases["test_passes"].find("failure") is None


@pytest.mark.slow
def test_last_failed_and_stepwise(run_inner) -> None:
    run_habits(run_inner, "-k", "not hangs")
    result, got = run_habits(run_inner, "--lf", "-k", "not hangs")
    assert got == {"test_fails_on_rank_1": "FAILED"}, result.stdout.str()
    result, got = run_habits(run_inner, "--sw", "-k", "not hangs")
    assert got == {"test_passes": "PASSED", "test_fails_on_rank_1": "FAILED"}, result.stdout.str()
    result, got = run_habits(
        run_inner, "--sw", "-k", "not hangs"
    )  # starts again at the failing test
    assert got == {"test_fails_on_rank_1": "FAILED"}, result.stdout.str()
