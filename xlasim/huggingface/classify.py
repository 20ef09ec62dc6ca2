"""Turning a Hugging Face job's run into rows, each non-pass with its class.

A script passes only if it exited 0 having launched ranks that exchanged data (the run report
of `xlasim run`): a script that returns early on a "not a TPU" branch tested nothing and gates
as a silent skip. A pytest test passes as pytest says; a skip by the TPU gate itself
(`require_tpu`: "test requires TPU") gates as a failure, since the gate must open on the
emulated slice. Every other non-pass gets a class from a finding whose signature is in the
output (`findings`), from the hub being offline, or from a missing optional package; else it is
an unexplained failure, and the run's exit status is 1.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter

from ..runners.execution import Outcome
from ..runners.reasons import crash_reason, first_error_line
from ..runners.rows import (
    CRASHED,
    FAILED,
    PASSED,
    SILENT_SKIP,
    SKIPPED,
    TIMED_OUT,
    Row,
    case_evidence,
    case_output,
    case_problem,
    describe_launches,
    junit_cases,
    junit_test_id,
    timed_out_reason,
)
from .discovery import PYTEST, HuggingFaceJob
from .findings import KNOWN_FAILURES

#: accelerate's `require_tpu` skip message: the gate stayed closed on the emulated slice.
TPU_GATE_SKIP = "test requires TPU"


def classify(job: HuggingFaceJob, outcome: Outcome) -> list[Row]:
    """The rows of one run of `job`: one for a script or a run that left no junit, else one
    per test pytest reported.

    Args:
        job: what ran: a script under its launcher, or a file's TPU-gated pytest tests.
        outcome: what the run left: exit status, output, run report (script) or junit file.
    """
    seconds = round(outcome.seconds, 1)
    if outcome.timed_out:
        return [Row(job.id, job.mode, TIMED_OUT, seconds, timed_out_reason(outcome))]
    crash = crash_reason(outcome.status, outcome.output)
    if job.mode != PYTEST:
        return [_script_row(job, outcome, crash, seconds)]
    cases = junit_cases(outcome.junit) if outcome.junit else []
    if not cases:
        if crash:
            return [Row(job.id, job.mode, CRASHED, seconds, crash)]
        error = first_error_line(outcome.output) or f"pytest exit status {outcome.status}"
        result, reason = KNOWN_FAILURES.failure(job.id, outcome.output, error)
        return [Row(job.id, job.mode, result, seconds, reason)]
    return [_case_row(job, case) for case in cases]


def _script_row(job: HuggingFaceJob, outcome: Outcome, crash: str | None, seconds: float) -> Row:
    if crash:
        return Row(job.id, job.mode, CRASHED, seconds, crash)
    if outcome.status != 0:
        error = first_error_line(outcome.output) or f"exit status {outcome.status}"
        result, reason = KNOWN_FAILURES.failure(job.id, outcome.output, error)
        return Row(job.id, job.mode, result, seconds, reason)
    report = outcome.report or {"launches": 0, "collectives": {}}
    launches, collectives = report["launches"], Counter(report["collectives"])
    if launches <= 0 or not collectives:
        done = describe_launches(launches, collectives)
        return Row(job.id, job.mode, SILENT_SKIP, seconds, f"ran no checks: exited 0 after {done}")
    return Row(job.id, job.mode, PASSED, seconds, describe_launches(launches, collectives))


def _case_row(job: HuggingFaceJob, case: ET.Element) -> Row:
    id = junit_test_id(job.target, case)
    seconds = round(float(case.get("time", 0)), 1)
    problem = case_problem(case, case_output(case))
    if problem is not None:
        result, reason = KNOWN_FAILURES.failure(id, *problem)
        return Row(id, job.mode, result, seconds, reason)
    skipped = case.find("skipped")
    if skipped is not None:
        message = skipped.get("message", "").strip()
        if TPU_GATE_SKIP in message:
            why = f"the TPU gate stayed closed on the emulated slice ({message})"
            return Row(id, job.mode, FAILED, seconds, why)
        return Row(id, job.mode, SKIPPED, seconds, message)
    return Row(id, job.mode, PASSED, seconds, case_evidence(case))
