"""Test files written for an SPMD process (torch_xla's own test/spmd): each runs in one.

Such a file turns SPMD on itself, at import or in `setUpClass` (`xr.use_spmd()`, often through
a shared base class in a sibling module), and is not written for the plugin: it has no `xla`
marker. Run in the pytest process, it would make the process SPMD for every later test (and
mixing SPMD with the emulated world's state crashed the process: signal 11 in
`torch::lazy::MultiWait::Complete`, "GetSharding should not be called on PjRtData"). So the
plugin runs such a file in a child pytest session of its own that is an SPMD world over the
slice (`xlasim.spmd.start_world`: the slice's devices and TPU identity, SPMD on) and replays
the child's reports here, test by test: the terminal, junit and the exit status read as if the
file had run here. The child first lists the file's tests (so `-k`, `--deselect` and xdist
work on them as usual), then runs the ones this session runs. Each test is bounded by the
plugin's timeout; a child that crashes or stops answering is ended, and its tests that had not
reported fail with what happened and the end of its output.

A file is taken for such a one when its code (parsed, so comments and strings do not count)
calls `use_spmd` or imports a sibling module whose code does, and it has no `mark.xla`.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..options.settings import resolve
from ..session import is_active, is_xdist_controller
from .processes import SESSION_ENV, spmd_world_of

#: How often the parent looks at the child's reports.
_POLL_S = 0.2


def _use_spmd_calls(node: ast.AST) -> bool:
    """A real call of `use_spmd` (`xr.use_spmd()`, `use_spmd()`) in `node`, not a comment or
    a string."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Call):
            func = inner.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "use_spmd":
                return True
    return False


def _handed_off(tree: ast.Module) -> set[str]:
    """Module-level functions the file hands to something else to run and never calls itself
    (`pool.submit(fn)`, `parameterized` cases): torch_xla's `test_persistent_cache.py` runs its
    SPMD programs so, in `ProcessPoolExecutor` children, and its own process stays a plain one
    (on a TPU it must: a child forked after the runtime started hangs)."""
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    called = {
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    named = {
        node.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
    }
    return (functions & named) - called


def _calls_use_spmd(tree: ast.Module) -> bool:
    """Whether running the file's tests calls `use_spmd` in this process: anywhere but in a
    function handed off to another process (`_handed_off`)."""
    handed_off = _handed_off(tree)
    return any(
        _use_spmd_calls(node)
        for node in tree.body
        if not (isinstance(node, ast.FunctionDef) and node.name in handed_off)
    )


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return None


def turns_spmd_on(path: Path) -> bool:
    """Whether a test file is an SPMD program not written for the plugin (see module doc)."""
    tree = _parse(path)
    if tree is None or "mark.xla" in ast.unparse(tree):
        return False
    if _calls_use_spmd(tree):
        return True
    imported = {
        alias.name.split(".")[0] if isinstance(node, ast.Import) else node.module or ""
        for node in tree.body
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in (node.names if isinstance(node, ast.Import) else [node])
    }
    for name in imported:
        sibling = path.with_name(f"{name}.py")
        if sibling != path and sibling.is_file():
            sibling_tree = _parse(sibling)
            if sibling_tree is not None and _calls_use_spmd(sibling_tree):
                return True
    return False


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> Any:
    config = parent.config
    if (
        SESSION_ENV in os.environ  # the child itself
        or not is_active(config)
        or is_xdist_controller(config)
        or not turns_spmd_on(module_path)
    ):
        return None
    return SpmdFile.from_parent(parent, path=module_path)


class SpmdFileTest(pytest.Item):
    """One test of an SPMD file: run by the child session, its reports replayed here."""

    def runtest(self) -> None:  # never called: `pytest_runtest_protocol` replays the reports
        raise NotImplementedError

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.name


class SpmdFile(pytest.File):
    """A test file that runs in a child pytest session that is an SPMD world."""

    def collect(self) -> Iterator[SpmdFileTest]:
        child = _Child(self.config, "collect", [str(self.path)])
        records = child.run(resolve(self.config).timeout)
        collected = [r["nodeid"] for r in records if "collected" in r]
        errors = [r for r in records if r.get("collect_error")]
        if errors or child.problem:
            raise self.CollectError(
                "\n".join(r["collect_error"] for r in errors)
                or f"the SPMD child session listing {self.path.name} {child.problem}"
            )
        prefix = self.nodeid + "::"
        for nodeid in collected:
            if nodeid.startswith(prefix):
                yield SpmdFileTest.from_parent(self, name=nodeid[len(prefix) :])

    def reports_of(self, item: SpmdFileTest) -> list[pytest.TestReport]:
        """The child's reports of `item`, running the child first when needed: every test of
        this file the session runs at once, or (an xdist worker, which is handed its tests one
        by one) this one."""
        cache: dict[str, list[pytest.TestReport]] = self.stash.setdefault(_reports_key, {})
        if item.nodeid not in cache:
            if "PYTEST_XDIST_WORKER" in os.environ:
                items = [item]
            else:
                items = [
                    i for i in item.session.items if i.parent is self and i.nodeid not in cache
                ]
            cache.update(_run_items(self.config, items))
        return cache.pop(item.nodeid)


_reports_key = pytest.StashKey[dict[str, list[pytest.TestReport]]]()


def _run_items(config: pytest.Config, items: list[SpmdFileTest]) -> dict[str, list]:
    """Run `items` in a child session; every item gets reports. When a child dies on a test
    (a crash, a hang), that test fails with what happened and the tests after it run in a
    fresh child, as a crash of one file's test would leave the others on a TPU VM."""
    reports: dict[str, list] = {i.nodeid: [] for i in items}
    pending = list(items)
    while pending:
        # By path: the child runs where this session was started, nodeids are rootdir-relative.
        child = _Child(config, "run", [f"{i.path}::{i.name}" for i in pending])
        for record in child.run(resolve(config).timeout):
            if "report" in record:
                report = config.hook.pytest_report_from_serializable(
                    config=config, data=record["report"]
                )
                if isinstance(report.longrepr, list):  # a skip's (path, line, reason): JSON
                    report.longrepr = tuple(report.longrepr)  # made it a list
                reports.setdefault(report.nodeid, []).append(report)
        unfinished = [i for i in pending if not _finished(reports[i.nodeid])]
        culprit = next((i for i in unfinished if i.nodeid == child.started_last), None)
        if culprit is None:  # died before any test started: nothing to retry on
            for item in unfinished:
                why = child.problem or "ended without reporting this test"
                reports[item.nodeid].append(_failure(item, why, child.tail()))
            break
        why = child.problem or "ended while running this test"
        reports[culprit.nodeid].append(_failure(culprit, why, child.tail()))
        pending = [i for i in unfinished if i is not culprit]
    return reports


def _finished(reports: list[pytest.TestReport]) -> bool:
    return any(r.when == "teardown" for r in reports)


def _failure(item: SpmdFileTest, why: str, tail: str) -> pytest.TestReport:
    text = f"[xlasim] the SPMD child session running {item.path.name} {why}"
    if tail:
        text += f"; the end of its output:\n{tail}"
    now = time.time()
    return pytest.TestReport(
        item.nodeid, item.location, {item.name: 1}, "failed", text, "call", [], 0.0, now, now
    )


def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    if not isinstance(item, SpmdFileTest):
        return None
    reports = item.parent.reports_of(item)  # type: ignore[union-attr]
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for report in reports:
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


class _Child:
    """A child pytest session that is an SPMD world, and what it wrote back."""

    def __init__(self, config: pytest.Config, phase: str, targets: list[str]):
        self._config = config
        self._phase = phase
        self._targets = targets
        self.problem = ""
        self.started_last = ""
        self._tail: list[str] = []
        self._log = Path(tempfile.mkstemp(prefix="xlasim-spmd-", suffix=".log")[1])
        self._records = Path(tempfile.mkstemp(prefix="xlasim-spmd-", suffix=".jsonl")[1])

    def _environment(self) -> dict[str, str]:
        devices, topology = spmd_world_of(self._config)
        session = {
            "devices": devices,
            "topology": None if topology is None else dataclasses.asdict(topology),
            "records": str(self._records),
        }
        from ...ranks import rank_coverage  # measured as this process is, if it is

        return {
            **os.environ,
            SESSION_ENV: json.dumps(session),
            **rank_coverage.startup_environment(),
        }

    def _command(self) -> list[str]:
        config = self._config
        args = [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:xlasim",
            "-p",
            "xlasim.pytest_plugin.spmd.files_child",
            "-p",
            "no:cacheprovider",
            f"--rootdir={config.rootpath}",
            f"--import-mode={config.getoption('importmode')}",
            f"--capture={config.getoption('capture')}",
            "-q",
        ]
        if config.inipath is not None:
            args.append(f"--config-file={config.inipath}")
        if self._phase == "collect":
            args.append("--collect-only")
        return args + self._targets

    def run(self, per_test: float) -> list[dict[str, Any]]:
        """Run the child, waiting at most `per_test` seconds for each of its records; return
        them (`problem` says how it ended when that was not well)."""
        with self._log.open("wb") as log:
            child = subprocess.Popen(
                self._command(),
                cwd=self._config.invocation_params.dir,
                env=self._environment(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        records: list[dict[str, Any]] = []
        seen, last = 0, time.monotonic()
        while True:
            done = child.poll() is not None
            lines = self._records.read_text(encoding="utf-8").splitlines()
            for line in lines[seen:]:
                record = json.loads(line)
                records.append(record)
                self.started_last = record.get("started", self.started_last)
            if len(lines) > seen:
                seen, last = len(lines), time.monotonic()
            if done:
                break
            if time.monotonic() - last > per_test:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                self.problem = f"wrote nothing for {per_test:g} s and was stopped (a hang?)"
                break
            time.sleep(_POLL_S)
        status = child.returncode
        if status is not None and status < 0:
            self.problem = f"was killed by {signal.Signals(-status).name}"
        elif status not in (0, 1, 5) and not self.problem:  # 1: tests failed; 5: none ran
            self.problem = f"exited with code {status}"
        self._records.unlink(missing_ok=True)
        self._tail = self._log.read_text(encoding="utf-8", errors="replace").splitlines()[-30:]
        self._log.unlink(missing_ok=True)
        return records

    def tail(self) -> str:
        """The end of the child's output (its crash message, its last test's prints)."""
        return "\n".join(self._tail)
