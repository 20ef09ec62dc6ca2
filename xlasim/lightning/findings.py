"""Why a Lightning TPU test does not pass on the emulated slice, when the reason is known.

Each entry maps a test id to its class, a one-line reason, a signature that must appear in the
test's output for the entry to apply, and the section of docs/lightning.md that shows it with a
minimal reproduction. Keep it small: every entry must be checkable from that section.
"""

from __future__ import annotations

from dataclasses import dataclass

#: A bug of Lightning's that a real TPU shows too: kept failing, written down.
LIGHTNING_BUG = "Lightning bug"
#: Something no CPU can give (real TPU hardware or its software stack).
NEEDS_TPU = "needs TPU"
#: The test hard-codes another slice than the one it runs on.
OTHER_SLICE = "other slice"


@dataclass(frozen=True)
class Finding:
    kind: str
    reason: str
    signature: str
    anchor: str


FINDINGS: dict[str, Finding] = {}
