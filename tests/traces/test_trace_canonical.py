"""collectives.txt's lines and `xlasim trace diff`'s first divergence, on texts written here: how a
call ended is said and read back, a call from another line is a divergence before any difference
in how calls ended, and runs differing only in how a call ended still differ. Pure: no ranks."""

from __future__ import annotations

from xlasim.trace_files import canonical
from xlasim.trace_files.timeline import Collective

HEAD = canonical.HEADER + "\nrank 0\n"


def collective(returned: int | None, error: str | None) -> Collective:
    return Collective(
        rank=0,
        launch=0,
        index=2,
        op="all_reduce",
        group=(0, 1),
        seq=1,
        arguments={"reduce_type": "sum"},
        tensors=[["float32", [4]]],
        bytes=16,
        site="step.py:9 in body",
        entered=10,
        arrived=11,
        last_arrived=None,
        returned=returned,
        error=error,
    )


def test_a_call_never_returned_from_and_one_that_raised_say_so_and_read_back():
    unfinished = canonical.line(collective(returned=None, error=None))
    raised = canonical.line(collective(returned=20, error="CollectiveTimeoutError"))
    returned = canonical.line(collective(returned=20, error=None))
    assert unfinished.endswith("| unfinished | at step.py:9 in body"), unfinished
    assert raised.endswith("| raised CollectiveTimeoutError | at step.py:9 in body"), raised
    read = canonical.parse(HEAD + "\n".join(f"  {x}" for x in (unfinished, raised, returned)))
    assert [e.status for e in read[0]] == ["unfinished", "raised CollectiveTimeoutError", ""]
    assert len({e.call for e in read[0]}) == 1  # the call itself is the same in all three


def two_calls(first_status: str, second_site: str) -> dict[int, list[canonical.Entry]]:
    lines = [
        f"  #0 launch 0 | all_reduce #0 in [0, 1] | - | [float32[4]] 16 B{first_status} | at a.py:1",
        f"  #1 launch 0 | all_reduce #1 in [0, 1] | - | [float32[4]] 16 B | at {second_site}",
    ]
    return canonical.parse(HEAD + "\n".join(lines))


def test_a_call_from_another_line_comes_before_an_earlier_difference_in_how_calls_ended():
    """A rank released by another's failure follows the divergence; the call made from another
    line is the divergence, though a later collective."""
    first = two_calls(" | raised RankFailedError", "a.py:5")
    second = two_calls("", "a.py:7")
    found = canonical.first_divergence(first, second)
    assert found is not None and (found.rank, found.index) == (0, 1), found


def test_runs_that_differ_only_in_how_a_call_ended_differ_there():
    found = canonical.first_divergence(
        two_calls(" | unfinished", "a.py:5"), two_calls("", "a.py:5")
    )
    assert found is not None and (found.rank, found.index) == (0, 0), found
    assert found.first.status == "unfinished" and found.second.status == ""
