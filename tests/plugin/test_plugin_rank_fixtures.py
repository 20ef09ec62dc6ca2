"""pytest's capsys, capsysbinary, capfd, capfdbinary, caplog, recwarn and monkeypatch, and a
`@xlasim.rank_fixture`, on each rank of a marked test (issue 33 item 4): one inner session
(inner_rank_fixtures.py) per mode, each rank reading back only its own output, logs and
warnings, its patches undone after the test."""

import pytest

EXPECTED = {
    "test_capsys": "PASSED",
    "test_capsysbinary": "PASSED",
    "test_capfd": "PASSED",
    "test_capfdbinary": "PASSED",
    "test_caplog": "PASSED",
    "test_recwarn": "PASSED",
    "test_monkeypatch": "PASSED",
    "test_monkeypatch_was_undone_on_the_ranks": "PASSED",
    "test_monkeypatch_was_undone_here": "PASSED",
    "test_rank_fixture": "PASSED",
    "test_unread_output_is_reported": "FAILED",
}


@pytest.mark.parametrize(
    "options",
    [
        pytest.param(("--xla-devices=2",), id="default"),
        pytest.param(("--xla-devices=2", "--xla-processes=1"), id="threads"),
        pytest.param(("--xla-devices=4", "--xla-processes=2"), id="multi-process"),
    ],
)
def test_pytest_fixtures_on_each_rank(run_inner, options) -> None:
    result, got = run_inner("inner_rank_fixtures.py", *options)
    assert {name: got.get(name) for name in EXPECTED} == EXPECTED, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            # What a rank's capsys did not read is its output as usual, in the report.
            "*_ test_unread_output_is_reported _*",
            "*- [[]rank 1/*[]] captured stdout -*",
            "unread 1",
        ]
    )
