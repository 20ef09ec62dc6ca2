"""A run's rows: what one row says, the results every runner shares, and what junit and the
output tell of each test (its failure, its evidence, the test a crash killed).

The runners differ in how they classify (each knows its suite's findings); the row, the results
that gate CI, the reading of junit and the timed-out and crashed verdicts are the same for all.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from .execution import Outcome
from .probe_names import COLLECTIVES, LAUNCHES
from .reasons import crash_reason, first_error_line, last_line

PASSED = "passed"
FAILED = "failed"
TIMED_OUT = "timed out"
CRASHED = "crashed"
SILENT_SKIP = "silent skip"
SKIPPED = "skipped"
NEEDS_PACKAGE = "needs package"
#: Results that fail the run (and a CI job gated on it).
GATING = frozenset({FAILED, TIMED_OUT, CRASHED, SILENT_SKIP})


@dataclass(frozen=True)
class Row:
    """One file's or test's result. `native` and `identity` are filled in the `tpu` suite
    only (`baseline`): the result natively on one CPU device, and what the emulated TPU
    identity did to the test."""

    id: str
    mode: str
    result: str
    seconds: float
    reason: str
    native: str = ""
    identity: str = ""


def describe_launches(launches: int, collectives: Counter[str]) -> str:
    """ "2 launches, 24 collectives (rendezvous 17, all_reduce 7)": what ranks did on the slice.

    Args:
        launches: how many times a test launched ranks on the emulated slice.
        collectives: the collectives the ranks completed, counted by op name.
    """
    ops = ", ".join(f"{op} {n}" for op, n in collectives.most_common())
    total = sum(collectives.values())
    return f"{launches} launch{'es' if launches != 1 else ''}, {total} collectives" + (
        f" ({ops})" if ops else ""
    )


def junit_cases(path: Path) -> list[ET.Element]:
    """The test cases of a junit file (none when pytest died while writing it)."""
    try:
        return list(ET.parse(path).getroot().iter("testcase"))
    except ET.ParseError:
        return []


def case_output(case: ET.Element) -> str:
    """A junit case's captured stdout and stderr."""
    return "\n".join(case.findtext(tag) or "" for tag in ("system-out", "system-err"))


def case_problem(case: ET.Element, output: str) -> tuple[str, str] | None:
    """A failed or erroring junit case's text to classify (message, traceback, output) and its
    first error line; None when the case did not fail.

    Args:
        case: a `<testcase>` element of a junit file.
        output: the case's captured output (`case_output`), appended to the text.
    """
    problem = case.find("failure")
    if problem is None:
        problem = case.find("error")
    if problem is None:
        return None
    message = problem.get("message", "").strip()
    text = f"{message}\n{problem.text or ''}\n{output}"
    return text, message.splitlines()[0] if message else first_error_line(text) or "failed"


def junit_test_id(rel: str, case: ET.Element) -> str:
    """`file::Class::test` from junit's dotted classname.

    Args:
        rel: the test file's path relative to pytest's rootdir, with `/` separators and
            `.py` (`test/test_ops.py`).
        case: a `<testcase>` element of the junit file pytest wrote for it.
    """
    module = rel[: -len(".py")].replace("/", ".")
    classname = case.get("classname", "")
    inner = classname[len(module) + 1 :] if classname.startswith(module + ".") else ""
    return "::".join(filter(None, [rel, *inner.split("."), case.get("name", "")]))


def case_evidence(case: ET.Element) -> str:
    """What a passing test did on the emulated slice, from the probe's junit properties: ranks
    launched and collectives completed (a test of configuration logic launches nothing)."""
    properties = {p.get("name"): p.get("value") for p in case.iter("property")}
    launches = int(properties.get(LAUNCHES) or 0)
    if not launches:
        return "in the test process (no ranks launched)"
    return describe_launches(launches, Counter(json.loads(properties.get(COLLECTIVES) or "{}")))


def timed_out_reason(outcome: Outcome) -> str:
    """Why a run killed at its timeout has no result, with its last line of output."""
    last = last_line(outcome.output)
    return f"killed after {outcome.timeout:.0f} s" + (f"; last output: {last}" if last else "")


def crashed_test(outcome: Outcome) -> str | None:
    """The pytest id of the test that was running when the process died, if one was."""
    if outcome.timed_out or outcome.junit or not outcome.started:
        return None
    return outcome.started[-1] if crash_reason(outcome.status, outcome.output) else None
