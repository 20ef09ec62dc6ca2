"""How xlasim shows up in pytest's output: the header line and per-rank failure sections.

A failing per-rank test (or `xla_world.run` call) is reported once, with a section per failing
rank (`[rank 3/8]`) holding that rank's traceback, cut to the test as pytest cuts its own, and
the rank's captured output. Run-level failures (collective mismatch, deadlock, timeout) are
reported by their message alone: it already says where every rank was, and the frames of the
plugin that noticed them would only hide it.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from importlib import metadata

import pytest
from _pytest._code.code import ExceptionInfo, ReprFileLocation, TerminalRepr
from _pytest._io import TerminalWriter

from ..errors import RankFailedError, XlasimError
from .activation import backend_key, emulated_devices, executor, is_xdist_controller
from .options import resolve
from .outcomes import RankOutcome, RanksFailed, outcomes_key, span


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def pytest_report_header(config: pytest.Config) -> str:
    backend = config.stash[backend_key]
    if backend == "emulated":
        size, topology = emulated_devices(resolve(config)), resolve(config).describe_slice()
        if is_xdist_controller(config):  # workers emulate; the controller starts no world
            topology += " per xdist worker"
    else:
        size, topology = executor(config).size, executor(config).describe()
    return (
        f"xlasim: backend {backend}, {size} XLA device{'s' if size != 1 else ''} ({topology}), "
        f"test timeout {resolve(config).timeout:g} s, torch {_version('torch')}, "
        f"torch_xla {_version('torch_xla')}"
    )


class RankFailuresRepr(TerminalRepr):
    """The failure report of a test whose ranks raised: one section per failing rank."""

    def __init__(self, item: pytest.Item, outcomes: Sequence[RankOutcome]):
        failing = [o for o in outcomes if o.failed] or [o for o in outcomes if o.error]
        self._sections = [(o, _rank_repr(item, o)) for o in failing]
        released = [o.rank for o in outcomes if o.released]
        self._note = (
            f"{span(released)} were released from their waits when the run was aborted"
            if released
            else ""
        )
        first, first_repr = self._sections[0]
        crash = getattr(first_repr, "reprcrash", None)
        message = f"[{first.label}] {type(first.error).__name__}: {first.error}"
        if len(failing) > 1:
            message += f" (and {span([o.rank for o in failing[1:]])})"
        self.reprcrash = ReprFileLocation(
            crash.path if crash else str(item.path), crash.lineno if crash else 0, message
        )

    def toterminal(self, tw: TerminalWriter) -> None:
        tw.line(self.reprcrash.message, red=True, bold=True)  # the summary line xdist keeps
        for outcome, rank_repr in self._sections:
            tw.sep("-", f"[{outcome.label}]", bold=True, red=True)
            if isinstance(rank_repr, TerminalRepr):
                rank_repr.toterminal(tw)
            else:
                tw.line(rank_repr.rstrip())
            for name, text in (("stdout", outcome.stdout), ("stderr", outcome.stderr)):
                if text:
                    tw.sep("-", f"[{outcome.label}] captured {name}")
                    tw.line(text.rstrip())
        if self._note:
            tw.line(self._note)


def _rank_repr(item: pytest.Item, outcome: RankOutcome) -> TerminalRepr | str:
    """pytest's own rendering of the rank's exception (made here, or where the rank ran), or
    the text a worker process sent."""
    error = outcome.error
    if outcome.repr is not None:
        return outcome.repr
    if error is None or not outcome.local_frames or error.__traceback__ is None:
        return outcome.traceback or f"{type(error).__name__}: {error}"
    return item.repr_failure(ExceptionInfo.from_exception(error))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.when != "call" or not report.failed or call.excinfo is None:
        return report
    error = call.excinfo.value
    outcomes = (
        error.outcomes if isinstance(error, RanksFailed) else item.stash.get(outcomes_key, None)
    )
    if isinstance(error, XlasimError) and not isinstance(error, RankFailedError):
        report.longrepr = f"[xlasim] {type(error).__name__}: {error}"
    elif outcomes and any(o.error is not None for o in outcomes):
        report.longrepr = RankFailuresRepr(item, outcomes)
    return report
