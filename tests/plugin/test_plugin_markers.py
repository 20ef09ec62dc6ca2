"""The plugin's markers check their arguments, and `@pytest.mark.xla(timeout=...)` bounds the test.

A misspelt or positional argument used to be ignored: the test ran on every core with the
session's timeout, and nothing said so.
"""

BAD_MARKERS = """
import pytest


@pytest.mark.xla(device=4)
def test_singular(xla_rank):
    pass


@pytest.mark.xla(devcies=[1, 2])
def test_misspelt(xla_rank):
    pass


@pytest.mark.xla(4)
def test_positional(xla_rank):
    pass


@pytest.mark.xla(devices=2, seconds=3)
def test_unknown_keyword(xla_rank):
    pass


@pytest.mark.xla(devices=[1, 0])
def test_bad_size(xla_rank):
    pass


@pytest.mark.xla(timeout="soon")
def test_bad_timeout(xla_rank):
    pass


@pytest.mark.xla_timeout(seconds=3, per_rank=True)
def test_timeout_marker(xla_world):
    pass


@pytest.mark.xla_metrics(compilation=1)
def test_metrics_marker(xla_world):
    pass


@pytest.mark.xla(devices=2, timeout=5)
@pytest.mark.xla_metrics(compilations=1, fallbacks=0)
def test_good(xla_rank):
    pass
"""


def test_marker_arguments_are_checked(pytester) -> None:
    pytester.makepyfile(test_markers=BAD_MARKERS)
    result = pytester.runpytest_subprocess("--collect-only", "-p", "no:cacheprovider")
    result.stderr.fnmatch_lines(
        [
            "ERROR: xlasim: bad marker arguments:",
            "  test_markers.py::test_singular: @pytest.mark.xla(device=4): unknown argument "
            "'device' (did you mean devices=?)",
            "  test_markers.py::test_misspelt: @pytest.mark.xla(devcies=[[]1, 2[]]): unknown "
            "argument 'devcies' (did you mean devices=?)",
            "  test_markers.py::test_positional: @pytest.mark.xla(4): arguments are given by "
            "keyword (devices=4 or timeout=4?)",
            "  test_markers.py::test_unknown_keyword: @pytest.mark.xla(devices=2, seconds=3): "
            "unknown argument 'seconds'",
            "  test_markers.py::test_bad_size: @pytest.mark.xla(devices=[[]1, 0[]]): devices must "
            "be a positive whole number or a list of them",
            "  test_markers.py::test_bad_timeout: @pytest.mark.xla(timeout='soon'): timeout must "
            "be a positive number of seconds",
            "  test_markers.py::test_timeout_marker: @pytest.mark.xla_timeout(seconds=3, "
            "per_rank=True): unknown argument 'per_rank'",
            "  test_markers.py::test_metrics_marker: @pytest.mark.xla_metrics(compilation=1): "
            "unknown argument 'compilation' (did you mean compilations=?)",
            "@pytest.mark.xla accepts by keyword: devices=N or devices=[[]N, ...[]] (the cores "
            "to run on), timeout=SECONDS (bound on the test's runs)",
            "@pytest.mark.xla_timeout accepts SECONDS (or seconds=SECONDS)",
            "@pytest.mark.xla_metrics accepts by keyword: compilations=N, fallbacks=N",
        ],
    )
    assert "test_good" not in result.stderr.str()
    assert result.ret == 4  # pytest's usage-error exit code


HANGS = """
import threading

import pytest


@pytest.mark.xla(devices=2, timeout=2)
def test_hangs(xla_rank):
    threading.Event().wait()  # bounded by the marker, not by --xla-timeout


@pytest.mark.xla(devices=2)
def test_after_the_hang(xla_rank):
    pass
"""


def test_marker_timeout_bounds_the_test(run_inner, pytester) -> None:
    pytester.makepyfile(test_hangs=HANGS)
    result = pytester.runpytest_subprocess(
        "-rA",
        "-p",
        "no:cacheprovider",
        "--xla-devices=2",
        "--xla-processes=1",
        "--xla-timeout=60",
        timeout=300,
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*CollectiveTimeoutError: the run did not finish within 2 s*"])
