"""Turning what a job left behind into rows: one per file in script mode, one per test in pytest
mode, each non-pass with a reason.

A pass has to be earned. torch_xla's multi-device tests gate on the hardware and exit 0 having
checked nothing when the device is not a TPU, so in the `mp` suite a script passes only if its
run report shows launched ranks and completed collectives, and a pytest test only if its own
counts do (see `xlasim.runners.pytest_probe`); torch_xla's "not a TPU device" messages are a
second net.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections import Counter

from ..runners.execution import Outcome
from ..runners.probe_names import COLLECTIVES, LAUNCHES
from ..runners.reasons import (
    assertion_site,
    compact,
    crash_reason,
    first_error_line,
    last_line,
    line_of,
    missing_package,
    unittest_summary,
)
from ..runners.rows import (
    CRASHED,
    FAILED,
    NEEDS_PACKAGE,
    PASSED,
    SILENT_SKIP,
    SKIPPED,
    TIMED_OUT,
    Row,
    case_output,
    case_problem,
    crashed_test,
    describe_launches,
    junit_cases,
    junit_test_id,
    timed_out_reason,
)
from .discovery import PYTEST, TorchXlaJob
from .expectations import (
    EMULATION_LIMITS,
    HARDWARE_GATES,
    KNOWN_BUGS,
    NEEDS_TPU,
    NO_COLLECTIVES,
)

#: A test marked as expected to fail (`unittest.expectedFailure`, `pytest.mark.xfail`) that ran
#: and failed: what its authors ask of it (junit files it as skipped, type `pytest.xfail`).
EXPECTED_FAILURE = "expected failure"
NEEDS_TPU_HARDWARE = "needs TPU"
KNOWN_BUG = "known bug"
EMULATION_LIMIT = "emulation limit"
#: A test the emulated identity does not touch (it runs natively on one CPU device too) that
#: fails natively the same way: not the emulation's doing (the `tpu` suite, see `baseline`).
FAILS_NATIVELY = "fails natively too"


def classify(job: TorchXlaJob, outcome: Outcome) -> list[Row]:
    """The rows of one run of `job`: one for a timed-out run or a script, one per junit test
    case under pytest (and one more when pytest itself died or failed).

    Args:
        job: the file (or test) that ran, and in which mode.
        outcome: what its run left: exit status, output, run report or junit file.
    """
    if outcome.timed_out:
        return [_row(job, TIMED_OUT, outcome.seconds, timed_out_reason(outcome))]
    if job.mode != PYTEST:  # a script, on its own or under torchrun: one row
        return [_script_row(job, outcome)]
    return _pytest_rows(job, outcome)


def _row(job: TorchXlaJob, result: str, seconds: float, reason: str, id: str | None = None) -> Row:
    return Row(id or job.rel, job.mode, result, round(seconds, 1), reason)


def _script_row(job: TorchXlaJob, outcome: Outcome) -> Row:
    status, text = outcome.status, outcome.output
    crash = crash_reason(status, text)
    if crash:
        return _row(job, CRASHED, outcome.seconds, crash + unittest_summary(text))
    if status != 0:
        error = first_error_line(text) or f"exit status {status}"
        result, reason = failure(job, job.rel, text, error)
        return _row(job, result, outcome.seconds, reason)
    summary = unittest_summary(text)
    result, reason = _exit_zero(job, job.rel, text, outcome.report, summary, "exited 0")
    return _row(job, result, outcome.seconds, reason)


def _exit_zero(
    job: TorchXlaJob, id: str, text: str, report: dict | None, summary: str, verb: str
) -> tuple[str, str]:
    """A run that exited 0 (or a test that passed, `verb` says which): a pass only if it did
    what its suite asks. `summary` (unittest's counts, or empty) ends every reason."""
    gate = HARDWARE_GATES.search(text)
    if gate:
        return SILENT_SKIP, f"{verb} after printing {line_of(text, gate.start())!r}{summary}"
    if not job.needs_collectives:
        return PASSED, summary.lstrip("; ")
    if report is None:
        return SILENT_SKIP, f"{verb} without xlasim's counts of launches (left through os._exit?)"
    launches, collectives = report["launches"], Counter(report["collectives"])
    if launches <= 0:
        return SILENT_SKIP, f"ran no checks: {verb} without launching ranks{summary}"
    done = describe_launches(launches, collectives)
    if not collectives:
        if id in NO_COLLECTIVES:
            return PASSED, f"{done} (expected: {NO_COLLECTIVES[id]}){summary}"
        return SILENT_SKIP, f"ran no checks: {done}{summary}"
    return PASSED, done + summary


def failure(job: TorchXlaJob, id: str, text: str, error: str) -> tuple[str, str]:
    """Why a run or test failed: a missing optional package, TPU-only code, a documented
    upstream bug or limit of emulation whose signature is in the output, or else `error` (its
    first error line).

    Args:
        job: the file the failure is in; its path keys known bugs and limits of the whole file.
        id: the failing row's id: the file's path relative to test/, or a pytest id
            (`file::Class::test`) for one test; it keys known bugs and limits first.
        text: the failure's output (with the message and traceback, for a test).
        error: its first error line, the reason when nothing known explains it.
    """
    package = missing_package(text, job.root)
    if package:
        return NEEDS_PACKAGE, f"needs {package} (No module named {package!r})"
    for pattern, why in NEEDS_TPU:
        if pattern.search(text):
            return NEEDS_TPU_HARDWARE, why
    for result, table in ((KNOWN_BUG, KNOWN_BUGS), (EMULATION_LIMIT, EMULATION_LIMITS)):
        for key in (id, job.rel):
            known = table.get(key)
            if known and re.search(known.signature, text):
                return result, f"{known.reason} ({known.link})"
    error = compact(error)
    site = assertion_site(text) if re.search(r"AssertionError:?\s*$", error) else None
    return FAILED, f"{error.rstrip(': ')} at {site}" if site else error


def _pytest_rows(job: TorchXlaJob, outcome: Outcome) -> list[Row]:
    status, text = outcome.status, outcome.output
    crash = crash_reason(status, text)
    cases = junit_cases(outcome.junit) if outcome.junit else []
    if crash and not cases:  # junit died with the process: the crash is the running test's
        return [_row(job, CRASHED, outcome.seconds, crash, crashed_test(outcome))]
    if not cases:
        if status == 5:
            return [_row(job, SILENT_SKIP, outcome.seconds, "pytest collected no tests")]
        error = first_error_line(text) or f"pytest exit status {status}"
        result, reason = failure(job, job.rel, text, error)
        return [_row(job, result, outcome.seconds, reason)]
    rows = [_case_row(job, case) for case in cases]
    if status not in (0, 1) and not (status == 2 and _collection_failed(cases)):
        # Died at exit, or an internal or usage error: say so. (2 after a collection error is
        # pytest's "Interrupted", and the error's own row already says why.)
        error = crash or f"pytest exit status {status}: {first_error_line(text) or last_line(text)}"
        rows.append(_row(job, CRASHED if crash else FAILED, outcome.seconds, error))
    return rows


def _collection_failed(cases: list[ET.Element]) -> bool:
    """Whether junit has a collection error (a module that could not be imported, for one)."""
    return any(
        error.get("message") == "collection failure" for c in cases for error in c.iter("error")
    )


def _case_row(job: TorchXlaJob, case: ET.Element) -> Row:
    id = _test_id(job, case)
    seconds = float(case.get("time", 0))
    output = case_output(case)
    problem = case_problem(case, output)
    if problem is not None:
        result, reason = failure(job, id, *problem)
        return _row(job, result, seconds, reason, id)
    skipped = case.find("skipped")
    if skipped is not None and skipped.get("type") == "pytest.xfail":
        return _row(job, EXPECTED_FAILURE, seconds, skipped.get("message", "").strip(), id)
    if skipped is not None:
        return _row(job, SKIPPED, seconds, skipped.get("message", "").strip(), id)
    properties = {p.get("name"): p.get("value") for p in case.iter("property")}
    report = (
        {
            "launches": int(properties[LAUNCHES]),
            "collectives": json.loads(properties.get(COLLECTIVES) or "{}"),
        }
        if LAUNCHES in properties
        else None
    )
    result, reason = _exit_zero(job, id, output, report, "", "passed")
    return _row(job, result, seconds, reason, id)


def _test_id(job: TorchXlaJob, case: ET.Element) -> str:
    return junit_test_id(job.rel, case)
