"""Turning a pytest run of Lightning's tests into rows, each non-pass with its class.

A failure is classified only by a finding whose signature appears in the output
(`findings.FINDINGS`): a different failure of the same test stays an unexplained failure, and
a pass stays a pass. Tests that Lightning skips because they are `standalone=True` are not rows
of the file's run: they run again, each in its own process, and those runs give their rows.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ..runners.execution import Outcome
from ..runners.reasons import crash_reason, first_error_line
from ..runners.rows import (
    CRASHED,
    PASSED,
    SKIPPED,
    TIMED_OUT,
    Row,
    case_evidence,
    case_output,
    case_problem,
    crashed_test,
    junit_cases,
    junit_test_id,
    timed_out_reason,
)
from .execution import LightningJob
from .findings import FINDINGS, KNOWN_FAILURES

XFAILED = "xfailed"
FILE_MODE, STANDALONE_MODE = "file", "standalone"
#: Lightning's skip reason for a standalone test outside a standalone run (its RunIf).
STANDALONE_SKIP = "Standalone execution"


def classify(run: LightningJob, outcome: Outcome) -> tuple[list[Row], list[str]]:
    """The rows of one run, and the ids of standalone tests it skipped (to run one by one).

    Args:
        run: what ran: a file's shared-process tests (mode `file`) or one standalone test.
        outcome: what the run left: exit status, output, junit file.
    """
    mode = STANDALONE_MODE if run.standalone else FILE_MODE
    if outcome.timed_out:
        why = timed_out_reason(outcome)
        return [Row(run.target, mode, TIMED_OUT, round(outcome.seconds, 1), why)], []
    crash = crash_reason(outcome.status, outcome.output)
    cases = junit_cases(outcome.junit) if outcome.junit else []
    if crash and not cases:
        test = crashed_test(outcome) or run.target
        return [Row(test, mode, CRASHED, round(outcome.seconds, 1), crash)], []
    if not cases:
        error = first_error_line(outcome.output) or f"pytest exit status {outcome.status}"
        result, reason = KNOWN_FAILURES.failure(run.target, outcome.output, error)
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


def _case_row(id: str, mode: str, case: ET.Element) -> Row:
    seconds = round(float(case.get("time", 0)), 1)
    problem = case_problem(case, case_output(case))
    if problem is not None:
        result, reason = KNOWN_FAILURES.failure(id, *problem)
        return Row(id, mode, result, seconds, reason)
    skipped = case.find("skipped")
    if skipped is not None:
        message = skipped.get("message", "").strip()
        if skipped.get("type") == "pytest.xfail":
            # Lightning's own expected failure. pytest keeps no traceback of an xfail, so no
            # signature can be checked: a finding about it is shown as documented, not matched.
            finding = FINDINGS.get(id)
            if finding is not None:
                why = f"[{finding.kind}, documented] {KNOWN_FAILURES.documented(finding)}"
                return Row(id, mode, XFAILED, seconds, why)
            return Row(id, mode, XFAILED, seconds, f"Lightning's xfail: {message}")
        return Row(id, mode, SKIPPED, seconds, message)
    return Row(id, mode, PASSED, seconds, case_evidence(case))


def _test_id(run: LightningJob, case: ET.Element) -> str:
    return junit_test_id(run.target.split("::", 1)[0], case)
