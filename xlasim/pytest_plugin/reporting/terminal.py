"""How xlasim shows up in pytest's output: the header line and per-rank failure sections.

A failing per-rank test (or `xla_world.run` call) is reported once, with a section per distinct
failure (`[rank 3/8]`, or `[ranks 0-7 of 8]` for ranks that failed alike) holding its traceback,
cut to the test as pytest cuts its own, and the ranks' captured output. A function that never
ran because it was written for the other rank-argument convention gets a hint saying which
convention the call uses. Run-level failures (collective mismatch, deadlock, timeout) are
reported by their message alone: it already says where every rank was, and the frames of the
plugin that noticed them would only hide it.
"""

from __future__ import annotations

import sys
from collections.abc import Generator, Sequence
from importlib import metadata

import pytest
from _pytest._code.code import ExceptionInfo, ReprFileLocation, TerminalRepr
from _pytest._io import TerminalWriter

from ...base.errors import RankFailedError, XlasimError
from ...reports.frames import first_user
from ...reports.rank_outcome import RankOutcome
from ..options.settings import resolve
from ..options.world_sizes import size_skips_key
from ..session import backend_key, executor, is_active, topology_description, woken_by_key
from .outcomes import (
    CORE_RUN_CONVENTION,
    RanksFailed,
    failed,
    never_called,
    outcomes_key,
    span,
)


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def header(config: pytest.Config) -> str:
    """`xlasim: backend emulated, 8 XLA devices (...), test timeout 300 s, torch ..."""
    backend = config.stash[backend_key]
    if backend == "emulated":
        size, topology = topology_description(config)
    else:
        size, topology = executor(config).size, executor(config).describe()
    return (
        f"xlasim: backend {backend}, {size} XLA device{'s' if size != 1 else ''} ({topology}), "
        f"test timeout {resolve(config).timeout:g} s, torch {_version('torch')}, "
        f"torch_xla {_version('torch_xla')}"
    )


def hypothesis_profile(config: pytest.Config) -> str | None:
    """`xlasim: hypothesis profile xla-emulated` (None without Hypothesis or while dormant)."""
    if not is_active(config) or "hypothesis" not in sys.modules:
        return None
    from hypothesis import settings

    return f"xlasim: hypothesis profile {settings.get_current_profile_name()}"


def pytest_report_header(config: pytest.Config) -> list[str]:
    if not is_active(config):
        return []
    profile = hypothesis_profile(config)
    return [header(config), *([profile] if profile else [])]


def size_skips(config: pytest.Config) -> str | None:
    """`xlasim: 12 tests will skip for this slice's size (4 cores): 8 need at least 8 cores, 4
    need exactly 8 cores`, once collection is done (`ranks` tallied them)."""
    tally = config.stash.get(size_skips_key, None)
    if tally is None:
        return None
    size = executor(config).size
    cores = f"{size} core{'s' if size != 1 else ''}"
    if not tally:
        return f"xlasim: no test skips for this slice's size ({cores})"
    total = sum(tally.values())
    why = ", ".join(
        f"{n} {_singular(key) if n == 1 else key}"
        for key, n in sorted(tally.items(), key=lambda kv: -kv[1])
    )
    return (
        f"xlasim: {total} test{'s' if total != 1 else ''} will skip for this slice's size "
        f"({cores}): {why}"
    )


def _singular(phrase: str) -> str:
    """`need at least 8 cores` -> `needs at least 8 cores` (the tally's phrases are plural)."""
    verb, _, rest = phrase.partition(" ")
    return f"{verb}s {rest}"


@pytest.hookimpl(trylast=True)  # after `activation` woke up, `ranks` tallied the size skips
def pytest_collection_finish(session: pytest.Session) -> None:
    """A session woken up by a collected test missed the header: its lines come now; every
    active session then says how many tests its slice is too small (or too big) for."""
    config = session.config
    if not is_active(config):
        return
    if woken_by_key in config.stash:
        write_line(config, header(config))
        profile = hypothesis_profile(config)
        if profile:
            write_line(config, profile)
    skips = size_skips(config)
    if skips:
        write_line(config, skips)


def write_line(config: pytest.Config, line: str) -> None:
    """A line of the plugin's own in pytest's output (none under xdist workers or -q -q).

    Args:
        config: the session's config, for its terminal reporter and verbosity.
        line: the text to write, without a newline.
    """
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and config.get_verbosity() >= 0:
        reporter.ensure_newline()
        reporter.write_line(line)


class RankFailuresRepr(TerminalRepr):
    """The failure report of a test whose ranks raised: a section per distinct failure.

    Ranks that failed the same way (same exception type and message, raised at the same place)
    share one section, `[ranks 0-7 of 8]`, holding the lowest rank's traceback; their captured
    output is shown once per distinct text. `hint` is a line to add under the summary.
    """

    def __init__(self, item: pytest.Item, outcomes: Sequence[RankOutcome], hint: str = ""):
        failing = [o for o in outcomes if failed(o)] or [o for o in outcomes if o.raised]
        groups: dict[tuple[str, ...], list[tuple[RankOutcome, TerminalRepr | str]]] = {}
        for outcome in failing:
            rendered = _rank_repr(item, outcome)
            groups.setdefault(_failure_key(outcome, rendered), []).append((outcome, rendered))
        self._sections = [
            (_label([o for o, _ in group]), group[0][1], [o for o, _ in group])
            for group in groups.values()
        ]
        self._hint = hint
        released = [o.rank for o in outcomes if o.released]
        self._note = (
            f"{span(released)} were released from their waits when the run was aborted"
            if released
            else ""
        )
        label, first_repr, first_group = self._sections[0]
        crash = getattr(first_repr, "reprcrash", None)
        first = first_group[0].error
        message = f"[{label}] {type(first).__name__}: {_headline(first)}"
        others = [o.rank for _, _, group in self._sections[1:] for o in group]
        if others:
            message += f" (and {span(sorted(others))})"
        self.reprcrash = ReprFileLocation(
            crash.path if crash else str(item.path), crash.lineno if crash else 0, message
        )

    def toterminal(self, tw: TerminalWriter) -> None:
        tw.line(self.reprcrash.message, red=True, bold=True)  # the summary line xdist keeps
        if self._hint:
            tw.line(self._hint, bold=True)
        for label, rank_repr, group in self._sections:
            tw.sep("-", f"[{label}]", bold=True, red=True)
            if isinstance(rank_repr, TerminalRepr):
                rank_repr.toterminal(tw)
            else:
                tw.line(rank_repr.rstrip())
            for name in ("stdout", "stderr"):
                texts: dict[str, list[RankOutcome]] = {}
                for outcome in group:
                    if getattr(outcome, name):
                        texts.setdefault(getattr(outcome, name), []).append(outcome)
                for text, writers in texts.items():
                    tw.sep("-", f"[{_label(writers)}] captured {name}")
                    tw.line(text.rstrip())
        if self._note:
            tw.line(self._note)


def _label(outcomes: Sequence[RankOutcome]) -> str:
    """`rank 3/8` for one rank, `ranks 0-7 of 8` for several."""
    if len(outcomes) == 1:
        return outcomes[0].label
    return f"{span([o.rank for o in outcomes])} of {outcomes[0].size}"


def _headline(error: BaseException | None) -> str:
    """The first line of the exception's message (an assert's explanation follows it, with
    values that may differ from rank to rank)."""
    lines = str(error).splitlines()
    return lines[0] if lines else ""


def _failure_key(outcome: RankOutcome, rendered: TerminalRepr | str) -> tuple[str, ...]:
    """What makes two ranks' failures the same: the exception's type and headline, and where
    it was raised (pytest's crash location, or the last frame of the text traceback)."""
    error = outcome.error
    crash = getattr(rendered, "reprcrash", None)
    if crash is not None:
        where = f"{crash.path}:{crash.lineno}"
    else:
        text = rendered if isinstance(rendered, str) else outcome.traceback
        frames = [line.strip() for line in text.splitlines() if line.strip().startswith("File ")]
        where = frames[-1] if frames else ""
    return type(error).__name__, _headline(error), where


def _rank_repr(item: pytest.Item, outcome: RankOutcome) -> TerminalRepr | str:
    """pytest's own rendering of the rank's exception (made where the rank ran, or here from
    its frames), or its text traceback. The emulator's frames above the user's code are left
    out (pytest cuts a per-rank test's traceback at the test; a function run through
    `xla_world` starts where it starts)."""
    error = outcome.error
    if outcome.rendering is not None:
        return outcome.rendering
    tb = first_user(error.__traceback__) if error is not None else None
    if tb is None:  # frames elsewhere, or raised by the emulator's call of the function
        return outcome.traceback or f"{type(error).__name__}: {error}"
    return item.repr_failure(ExceptionInfo.from_exc_info((type(error), error, tb)))


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
    elif outcomes and any(o.raised for o in outcomes):
        report.longrepr = RankFailuresRepr(item, outcomes, getattr(error, "hint", ""))
    elif isinstance(error, RankFailedError) and hasattr(report.longrepr, "addsection"):
        # The core's own world (xmp.spawn, xlasim.world().run) called from a test: a call that
        # does not fit fails alike on every rank.
        ranks = error.ranks
        errors = [error.failures[r] for r in ranks]
        if never_called(errors, [error.tracebacks.get(r, "") for r in ranks]):
            report.longrepr.addsection("xlasim", CORE_RUN_CONVENTION)
    return report
