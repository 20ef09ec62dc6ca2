"""How N per-rank outcomes become the one test outcome (`outcomes.settle`), rule by rule.

The inner sessions (test_plugin_emulated.py, test_plugin_processes.py) show the same rules end
to end; these checks pin each rule on its own, with outcomes as the ranks hand them over, so
the mutation run proves each is guarded within a second (tests/mutation: the mutants
`settle-picks-the-wrong-rank` and `inconsistent-skips-accepted`).

What settle raises is caught as a value (`settled`), never with `pytest.raises`: a `Skipped`
that escaped a check would make pytest skip the check instead of failing it."""

import pytest
from _pytest.outcomes import Skipped, XFailed

from xlasim import RankOutcome, WorldAbortedError
from xlasim.pytest_plugin.reporting.outcomes import InconsistentOutcomeError, settle

SIZE = 4


def settled(outcomes: list[RankOutcome]) -> BaseException | None:
    """The exception `settle` raises (the test's outcome), or None when the test passed."""
    try:
        settle(outcomes)
    except BaseException as outcome:  # Skipped and XFailed are not Exceptions
        return outcome
    return None


def passed(rank: int) -> RankOutcome:
    return RankOutcome(rank, SIZE, result=None)


def raised(rank: int, error: BaseException) -> RankOutcome:
    return RankOutcome(rank, SIZE, error=error)


def released(rank: int, cause: BaseException) -> RankOutcome:
    return RankOutcome(rank, SIZE, error=WorldAbortedError(cause))


def test_every_rank_passed_is_a_pass():
    assert settled([passed(r) for r in range(SIZE)]) is None


def test_ranks_failing_differently_give_the_lowest_failing_ranks_own_exception():
    first, second = KeyError("rank 1"), ValueError("rank 3")
    outcomes = [passed(0), raised(1, first), released(2, first), raised(3, second)]
    assert settled(outcomes) is first  # so xfail(raises=...) and pytest.raises see the rank's own


def test_a_failure_wins_over_skips():
    failure = AssertionError("rank 2")
    outcomes = [raised(0, Skipped("rank 0 leaves")), passed(1), raised(2, failure), passed(3)]
    assert settled(outcomes) is failure


@pytest.mark.parametrize("kind", [Skipped, XFailed])
def test_a_skip_or_xfail_taken_by_every_rank_is_the_tests(kind):
    outcome = settled([raised(r, kind("no data")) for r in range(SIZE)])
    assert type(outcome) is kind and outcome.msg == "no data"


def test_a_skip_on_some_ranks_only_is_an_inconsistency_naming_each_rank():
    skip = Skipped("only rank 0 leaves")
    outcomes = [raised(0, skip), released(1, skip), passed(2), passed(3)]
    outcome = settled(outcomes)
    assert isinstance(outcome, InconsistentOutcomeError)
    assert str(outcome).splitlines()[1:] == [
        "  rank 0: skipped (only rank 0 leaves)",
        "  rank 1: released from a collective wait when the run was aborted",
        "  ranks 2-3: ran to the end",
    ]


def test_skips_and_xfails_mixed_over_every_rank_are_an_inconsistency():
    outcomes = [raised(r, (Skipped if r % 2 else XFailed)("differs")) for r in range(SIZE)]
    outcome = settled(outcomes)
    assert isinstance(outcome, InconsistentOutcomeError)
    assert "  ranks 0, 2: xfailed (differs)" in str(outcome).splitlines()
