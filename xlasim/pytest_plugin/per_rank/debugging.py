"""pytest's debugger options on per-rank tests: `--pdb`, `--trace` and breakpoints in ranks.

pytest's own `--pdb` opens pdb in the pytest process at the frame the test's failure was raised
in; a per-rank test's failure was raised in a rank (a thread, or a worker process) and re-raised
here by the plugin, whose frame says nothing. So the ranks open their post-mortem themselves
(`rank_debugging.on_ranks`) and this module stands in for pytest's two debugging plugins
(`pdbinvoke`, `pdbtrace`) where ranks are concerned: a failure whose post-mortem a rank
showed gets no second one here (its `q` still ends the session), and `--trace` starts a
per-rank test's body under pdb on the ranks (`rank_debugging.test_body`), not the body pytest
would call here. Everything else is handed to pytest's plugins unchanged.

Ranks' debuggers are shown at this process's terminal by `rank_debugging.PytestTerminal`.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from ...reports import debugger_desk
from ..session import is_active
from .rank_debugging import PytestTerminal

terminal_key = pytest.StashKey[PytestTerminal]()


@pytest.hookimpl(trylast=True)  # after pytest's debugging plugin registered its own
def pytest_configure(config: pytest.Config) -> None:
    terminal = config.stash[terminal_key] = PytestTerminal(config)
    debugger_desk.use_terminal(terminal)
    config.add_cleanup(lambda: debugger_desk.use_terminal(None))
    manager = config.pluginmanager
    for name, stand_in in (("pdbinvoke", PdbInvokeOnRanks), ("pdbtrace", PdbTraceOnRanks)):
        pytests = manager.get_plugin(name)
        if pytests is not None:
            manager.unregister(pytests)
            manager.register(stand_in(pytests, terminal), name)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    terminal = item.config.stash.get(terminal_key, None)
    if terminal is not None:
        terminal.forget()


def runs_on_ranks(item: pytest.Item) -> bool:
    """Whether `item`'s body runs on the ranks (where it is traced and fails)."""
    return is_active(item.config) and item.get_closest_marker("xla") is not None


class PdbInvokeOnRanks:
    """pytest's `--pdb`, but not a second time for a failure a rank's post-mortem showed."""

    def __init__(self, pytests: Any, terminal: PytestTerminal):
        self._pytests = pytests
        self._terminal = terminal

    def pytest_exception_interact(
        self, node: pytest.Item, call: pytest.CallInfo[Any], report: pytest.TestReport
    ) -> None:
        if not self._terminal.post_mortem_shown:
            self._pytests.pytest_exception_interact(node, call, report)
        elif self._terminal.post_mortem_quit:
            pytest.exit("Quitting debugger")

    def pytest_internalerror(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        self._pytests.pytest_internalerror(excinfo)


class PdbTraceOnRanks:
    """pytest's `--trace`, but a per-rank test's body is traced on its ranks."""

    def __init__(self, pytests: Any, terminal: PytestTerminal):
        self._pytests = pytests

    @pytest.hookimpl(wrapper=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> Generator[None, Any, Any]:
        if not runs_on_ranks(pyfuncitem):
            from _pytest.debugging import wrap_pytest_function_for_tracing

            wrap_pytest_function_for_tracing(pyfuncitem)
        return (yield)
