"""The plugin's markers check their arguments, `@pytest.mark.xla(timeout=...)` bounds the test,
and a slice too small for a test (`devices=N`, `min_devices=N`, `xla_min_devices(N)`) skips it
with the reason, counted in the header before anything runs.

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


@pytest.mark.xla(min_devices=0)
def test_bad_minimum(xla_rank):
    pass


@pytest.mark.xla(devices=4, min_devices=2)
def test_size_and_minimum(xla_rank):
    pass


@pytest.mark.xla_min_devices()
def test_minimum_without_a_number(xla_world):
    pass


@pytest.mark.xla_min_devices(2, 4)
def test_minimum_twice(xla_world):
    pass


@pytest.mark.xla(devices=2, timeout=5)
@pytest.mark.xla_metrics(compilations=1, fallbacks=0)
def test_good(xla_rank):
    pass


@pytest.mark.xla(min_devices=2, timeout=5)
def test_good_minimum(xla_rank):
    pass


@pytest.mark.xla_min_devices(2)
def test_good_world_minimum(xla_world):
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
            "keyword (devices=4 or min_devices=4 or timeout=4?)",
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
            "  test_markers.py::test_bad_minimum: @pytest.mark.xla(min_devices=0): min_devices "
            "must be a whole number >= 1",
            "  test_markers.py::test_size_and_minimum: @pytest.mark.xla(devices=4, min_devices=2): "
            "devices and min_devices exclude each other*",
            "  test_markers.py::test_minimum_without_a_number: @pytest.mark.xla_min_devices(): "
            "takes the least number of cores the test needs: xla_min_devices(N)",
            "  test_markers.py::test_minimum_twice: @pytest.mark.xla_min_devices(2, 4): takes one "
            "number of cores",
            "@pytest.mark.xla accepts by keyword: devices=N or devices=[[]N, ...[]] (the cores "
            "to run on), min_devices=N (run on every core, skip below N; not with devices), "
            "timeout=SECONDS (bound on the test's runs), spmd=True (the body runs once, in a "
            "process with xr.use_spmd() on over the slice)",
            "@pytest.mark.xla_timeout accepts SECONDS (or seconds=SECONDS)",
            "@pytest.mark.xla_metrics accepts by keyword: compilations=N, fallbacks=N",
            "@pytest.mark.xla_min_devices accepts N, a whole number >= 1 (or devices=N)",
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


SIZES = """
import pytest
import torch_xla.runtime as xr


@pytest.mark.xla(min_devices=2)
def test_at_least_two(xla_rank):
    assert xla_rank.world_size == xr.world_size() == 2  # every core of the session


@pytest.mark.xla(min_devices=4)
def test_at_least_four(xla_rank):
    pass


@pytest.mark.xla(devices=4)
def test_exactly_four(xla_rank):
    pass


@pytest.mark.xla_min_devices(2)
def test_world_of_two(xla_world):
    assert xla_world.run(xr.world_size) == [2, 2]


@pytest.mark.xla_min_devices(8)
def test_world_of_eight(xla_world):
    pass


def test_any_world(xla_world):
    assert len(xla_world.run(xr.global_ordinal)) == xla_world.size
"""


def test_a_slice_too_small_skips_with_the_reason_counted_in_the_header(run_inner, pytester):
    pytester.makepyfile(test_sizes=SIZES)
    result = pytester.runpytest_subprocess(
        "-rA", "-p", "no:cacheprovider", "--xla-devices=2", "--xla-processes=1", timeout=300
    )
    result.assert_outcomes(passed=3, skipped=3)
    result.stdout.fnmatch_lines(
        [
            "collected 6 items",
            "xlasim: 3 tests will skip for this slice's size (2 cores): 1 needs at least 4 cores"
            ", 1 needs exactly 4 cores, 1 needs at least 8 cores",
        ]
    )
    result.stdout.fnmatch_lines_random(
        [
            "SKIPPED [[]1[]] test_sizes.py:*: needs at least 4 XLA cores, this session has 2 "
            "(--xla-devices=4 or more to run it)",
            "SKIPPED [[]1[]] test_sizes.py:*: needs 4 XLA cores, this session has 2 "
            "(--xla-devices=4 or more to run it)",
            "SKIPPED [[]1[]] test_sizes.py:*: needs at least 8 XLA cores, this session has 2 "
            "(--xla-devices=8 or more to run it)",
        ]
    )
