"""The names the probe plugin (`pytest_probe`) and the runners share: the junit properties it
writes, the variable naming its progress file, and the pytest options that load it. Apart from
the plugin because the plugin imports pytest, and the `xlasim` command (which imports the
runners) must work where pytest is not installed (`pip install xlasim`, then `xlasim run`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

LAUNCHES = "xlasim_launches"
COLLECTIVES = "xlasim_collectives"
PROGRESS_ENV = "XLASIM_CONFORMANCE_PROGRESS"


def probed_pytest_options(junit: Path, deselect: Sequence[str]) -> list[str]:
    """The pytest options of a probed run: junit with every test's output, the probe plugin
    that records each test's launches and collectives, and the tests left out.

    Args:
        junit: the junit XML file pytest writes.
        deselect: pytest ids of the tests to leave out (`file::Class::test`), each passed
            as `--deselect`; empty: none.
    """
    return [
        f"--junitxml={junit}",
        "-o",
        "junit_logging=all",
        "-o",
        "junit_family=xunit1",
        # sys, not fd: XLA's own log lines (the reason for an abort) reach the output.
        "--capture=sys",
        "-p",
        "no:cacheprovider",
        "-p",
        "xlasim.runners.pytest_probe",
        *(f"--deselect={id}" for id in deselect),
    ]
