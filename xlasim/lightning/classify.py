"""Turning a pytest run of Lightning's tests into rows, each non-pass with its class.

A failure is classified only by a finding whose signature appears in the output
(`findings.FINDINGS`): a different failure of the same test stays an unexplained failure, and
a pass stays a pass. Tests that Lightning skips because they are `standalone=True` are not rows
of the file's run: they run again, each in its own process, and those runs give their rows.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from ..conformance.classify import (
    CRASHED,
    FAILED,
    NEEDS_PACKAGE,
    PASSED,
    SKIPPED,
    TIMED_OUT,
    Row,
    case_evidence,
    case_output,
    case_problem,
    junit_cases,
    junit_test_id,
)
from ..conformance.execution import Outcome
from ..conformance.reasons import compact, crash_reason, first_error_line, last_line
from .execution import Run
from .findings import FINDINGS, Finding

XFAILED = "xfailed"
FILE_MODE, STANDALONE_MODE = "file", "standalone"
#: Lightning's skip reason for a standalone test outside a standalone run (its RunIf).
STANDALONE_SKIP = "Standalone execution"
_MISSING = re.compile(r"(?:ModuleNotFoundError: No module named '([\w.]+)'|Neither `(\w+)` nor)")


def classify(run: Run, outcome: Outcome) -> tuple[list[Row], list[str]]:
    """The rows of one run, and the ids of standalone tests it skipped (to run one by one)."""
    mode = STANDALONE_MODE if run.standalone else FILE_MODE
    if outcome.timed_out:
        last = last_line(outcome.output)
        why = f"killed after {outcome.timeout:.0f} s" + (f"; last output: {last}" if last else "")
        return [Row(run.target, mode, TIMED_OUT, round(outcome.seconds, 1), why)], []
    crash = crash_reason(outcome.status, outcome.output)
    cases = junit_cases(outcome.junit) if outcome.junit else []
    if crash and not cases:
        test = crashed_test(outcome) or run.target
        return [Row(test, mode, CRASHED, round(outcome.seconds, 1), crash)], []
    if not cases:
        error = first_error_line(outcome.output) or f"pytest exit status {outcome.status}"
        result, reason = failure(run.target, outcome.output, error)
        return [Row(run.target, mode, result, round(outcome.seconds, 1), reason)], []
    rows, standalone = [], []
    for case in cases:
        id = _test_id(run, case)
        skipped = case.find("skipped")
        if (
            not run.standalone
            and skipped is not None
            and STANDALONE_SKIP in skipped.get("message", "")
        ):
            standalone.append(id)
            continue
        rows.append(_case_row(id, mode, case))
    return rows, standalone


def crashed_test(outcome: Outcome) -> str | None:
    """The id of the test that was running when the process died, if one was."""
    if outcome.timed_out or outcome.junit or not outcome.started:
        return None
    return outcome.started[-1] if crash_reason(outcome.status, outcome.output) else None


def failure(id: str, text: str, error: str) -> tuple[str, str]:
    """Why a test failed: a finding whose signature is in the output, a missing package, or
    else its first error line (unexplained: it gates)."""
    finding = FINDINGS.get(id)
    if finding is not None and re.search(finding.signature, text):
        return finding.kind, _finding_reason(finding)
    missing = _MISSING.search(text)
    if missing:
        package = missing.group(1) or missing.group(2)
        return NEEDS_PACKAGE, f"needs {package} (Lightning's test requirements)"
    return FAILED, compact(error)


def _finding_reason(finding: Finding) -> str:
    return f"{finding.reason} (docs/lightning.md#{finding.anchor})"


def _case_row(id: str, mode: str, case: ET.Element) -> Row:
    seconds = round(float(case.get("time", 0)), 1)
    problem = case_problem(case, case_output(case))
    if problem is not None:
        result, reason = failure(id, *problem)
        return Row(id, mode, result, seconds, reason)
    skipped = case.find("skipped")
    if skipped is not None:
        message = skipped.get("message", "").strip()
        if skipped.get("type") == "pytest.xfail":
            # Lightning's own expected failure. pytest keeps no traceback of an xfail, so no
            # signature can be checked: a finding about it is shown as documented, not matched.
            finding = FINDINGS.get(id)
            if finding is not None:
                why = f"[{finding.kind}, documented] {_finding_reason(finding)}"
                return Row(id, mode, XFAILED, seconds, why)
            return Row(id, mode, XFAILED, seconds, f"Lightning's xfail: {message}")
        return Row(id, mode, SKIPPED, seconds, message)
    return Row(id, mode, PASSED, seconds, case_evidence(case))


def _test_id(run: Run, case: ET.Element) -> str:
    return junit_test_id(run.target.split("::", 1)[0], case)
