"""Known failures of other people's suites on the emulated slice, and the one way a runner
explains a failure with them.

A finding applies to a failure only when its signature is in the failure's output: another
failure of the same test stays unexplained (it gates). Lightning's and Hugging Face's runners
each keep a table of findings, documented with reproductions in their docs page; torch_xla's
runner keeps its own (`conformance/expectations.py`), keyed by file as well as by test.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from .reasons import compact
from .rows import FAILED, NEEDS_PACKAGE

#: Something no CPU can give (real TPU hardware or its software stack).
NEEDS_TPU = "needs TPU"
#: The emulated slice answers differently from a TPU: not fixed yet, written down.
EMULATION_GAP = "emulation gap"


@dataclass(frozen=True)
class Finding:
    """Why a test fails: its class, a one-line reason, the signature its output must hold, and
    the section of the runner's docs page that shows it."""

    kind: str
    reason: str
    signature: str
    anchor: str


#: A cause of failure other than a finding or a missing package, read from a failure's output:
#: its (class, reason), or None.
OtherCause = Callable[[str], tuple[str, str] | None]


@dataclass(frozen=True)
class KnownFailures:
    """A runner's findings, where they are documented, and how it tells a missing package.

    `missing` finds a missing package's name (in its first group that matched);
    `requirements` says where such a package comes from; a package in `stack` is part of what
    is under test, never optional. `others` are causes checked between the findings and a
    missing package (Hugging Face's hub, offline)."""

    findings: Mapping[str, Finding]
    doc: str
    missing: re.Pattern[str]
    requirements: str
    stack: frozenset[str] = frozenset()
    others: Sequence[OtherCause] = ()

    def failure(self, id: str, text: str, error: str) -> tuple[str, str]:
        """Why `id` failed, as (class, reason): a finding whose signature is in `text`, another
        known cause, a missing package, or else `error` (unexplained: it gates).

        Args:
            id: the row's id, the findings' key.
            text: the failure's output.
            error: its first error line.
        """
        finding = self.findings.get(id)
        if finding is not None and re.search(finding.signature, text):
            return finding.kind, self.documented(finding)
        for cause in self.others:
            found = cause(text)
            if found:
                return found
        missing = self.missing.search(text)
        if missing:
            package = next(group for group in missing.groups() if group)
            if package.split(".")[0] not in self.stack:
                return NEEDS_PACKAGE, f"needs {package} ({self.requirements})"
        return FAILED, compact(error)

    def documented(self, finding: Finding) -> str:
        """`finding`'s reason and the section of the docs page that shows it."""
        return f"{finding.reason} ({self.doc}#{finding.anchor})"
