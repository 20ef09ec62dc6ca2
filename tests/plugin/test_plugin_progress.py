"""A session never sits silent while the slice starts: a line before setting the slice up
(the torch_xla import), and lines around the ranks' start, which pytest's header precedes so
that the session's reported time includes it; none under `-qq`."""

import re

MARKED = """
import pytest


@pytest.mark.xla
def test_on_ranks(xla_rank):
    assert xla_rank.world_size == 2
"""


def test_progress_lines_while_the_slice_starts(pytester, inner_environment) -> None:
    pytester.makepyfile(test_marked=MARKED)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--xla-devices=2", "--xla-processes=2", timeout=300
    )
    result.assert_outcomes(passed=1)
    # Before pytest's terminal exists, the first line goes to stderr.
    assert "xlasim: setting up 1 host x 2 processes x 1 core = 2 cores ..." in result.stderr.str()
    output = result.stdout.str()
    lines = [
        "test session starts",
        "xlasim: starting the ranks ...",
        "xlasim: ranks ready in ",
        "1 passed in ",
    ]
    positions = [output.find(line) for line in lines]
    assert -1 not in positions and positions == sorted(positions), output
    ready = float(re.search(r"ranks ready in ([0-9.]+) s", output).group(1))
    reported = float(re.search(r"1 passed in ([0-9.]+)s", output).group(1))
    assert reported >= ready, output  # the start is part of the session's time


def test_no_progress_lines_under_double_quiet(pytester, inner_environment) -> None:
    pytester.makepyfile(test_marked=MARKED)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-qq", "--xla-devices=2", "--xla-processes=1", timeout=300
    )
    assert result.ret == 0, result.stdout.str()
    assert "xlasim:" not in result.stdout.str() + result.stderr.str()
