"""The plugin's own progress lines, so a session never sits silent while the slice starts.

Setting the slice up (importing torch and torch_xla, starting the fork server) happens before
pytest's terminal reporter exists and while pytest captures the process' output; starting the
worker processes takes seconds more. Each gets a line on the terminal as it begins.
"""

from __future__ import annotations

import os
import sys

import pytest


def say(config: pytest.Config, line: str) -> None:
    """Write `line` to the terminal now (nothing under `-qq` or in an xdist worker, whose
    output the controller does not show).

    Args:
        config: the session's config: its verbosity, and its terminal reporter or capture
            manager, whichever exists yet.
        line: the text to write, without a newline.
    """
    if _verbosity(config) < -1 or "PYTEST_XDIST_WORKER" in os.environ:
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_line(line)
        return
    capture = config.pluginmanager.get_plugin("capturemanager")
    if capture is None:
        print(line, file=sys.stderr, flush=True)
        return
    with capture.global_and_fixture_disabled():
        print(line, file=sys.stderr, flush=True)


def _verbosity(config: pytest.Config) -> int:
    """`-v` minus `-q`; before pytest's own options are set up (`pytest_load_initial_conftests`)
    only the early parse of the command line has it."""
    early = getattr(config, "known_args_namespace", None)
    return getattr(early, "verbose", None) or config.getoption("verbose", 0) or 0
