"""Fixtures for the plugin's own tests, which run inner pytest sessions through `pytester`."""

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

HERE = Path(__file__).parent
_SUMMARY = re.compile(r"^(PASSED|FAILED|SKIPPED|XFAIL|XPASS|ERROR) \S*?::(\S+)")


def outcomes(result: pytest.RunResult) -> dict[str, str]:
    """Each inner test's outcome by name, from the `-rA` short summary."""
    found = {}
    for line in result.outlines:
        match = _SUMMARY.match(line)
        if match:
            found[match.group(2)] = match.group(1)
    return found


@pytest.fixture
def inner_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The environment of inner sessions: the outer session's choices are not the inner's."""
    for name in (
        "XLASIM_DEVICES",
        "XLASIM_PROCESSES",
        "XLASIM_HOSTS",
        "XLASIM_TOPOLOGY",
        "XLASIM_BACKEND",
        "XLASIM_TEST_TIMEOUT",
        "XLASIM_ARITHMETIC",
        "XLASIM_MACHINES",
        "XLASIM_MACHINE_RANK",
        "XLASIM_RENDEZVOUS",
        "XLASIM_POD_TOKEN",
        "PYTEST_XDIST_WORKER",
    ):
        monkeypatch.delenv(name, raising=False)
    if not os.environ.get("PJRT_DEVICE", "CPU").startswith("CPU"):
        # On a TPU VM (`tox -e tpu` sets PJRT_DEVICE=TPU) the inner sessions still emulate
        # on the CPU device: the chips belong to the outer session's workers.
        monkeypatch.setenv("PJRT_DEVICE", "CPU")
        monkeypatch.delenv("CPU_NUM_DEVICES", raising=False)
    return monkeypatch


@pytest.fixture
def run_inner(
    pytester: pytest.Pytester, inner_environment: pytest.MonkeyPatch
) -> Callable[..., tuple[pytest.RunResult, dict]]:
    """Run one of this folder's `inner_*.py` files in a fresh pytest process.

    A fresh process each time: the device count is fixed once torch_xla's runtime starts.
    Returns the result and each inner test's outcome by name.
    """

    def run(inner: str, *args: str, cache: bool = False) -> tuple[pytest.RunResult, dict[str, str]]:
        pytester.makepyfile(test_inner=(HERE / inner).read_text())
        no_cache = () if cache else ("-p", "no:cacheprovider")  # `--lf`, `--sw` need it
        result = pytester.runpytest_subprocess("-rA", *no_cache, *args, timeout=300)
        return result, outcomes(result)

    return run
