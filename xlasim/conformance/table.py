"""The runner's output: a plain-text table for people (also valid Markdown, so a run can be pasted
into docs/conformance.md), the rows as JSON for tools, and the CI verdict."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from .classify import GATING, Row

#: Longest reason shown in the table; the JSON keeps the whole reason.
REASON_WIDTH = 210


def failing(rows: Sequence[Row]) -> list[Row]:
    """The rows that fail a CI gate: failed, crashed, timed out, silently skipped."""
    return [row for row in rows if row.result in GATING]


def format_table(rows: Sequence[Row]) -> str:
    cells = [
        (row.id, row.mode, row.result, f"{row.seconds:.1f}", _cell(row.reason)) for row in rows
    ]
    header = ("test", "mode", "result", "seconds", "reason")
    widths = [max(len(r[i]) for r in [header, *cells]) for i in range(len(header))]

    def line(values: Sequence[str]) -> str:
        padded = (
            v.rjust(w) if i == 3 else v.ljust(w) for i, (v, w) in enumerate(zip(values, widths))
        )
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    counts = Counter(row.result for row in rows)
    total = ", ".join(f"{n} {result}" for result, n in sorted(counts.items()))
    return "\n".join([line(header), rule, *map(line, cells), "", f"{len(rows)} rows: {total}"])


def _cell(reason: str) -> str:
    reason = " ".join(reason.split()).replace("|", "\\|")
    return reason if len(reason) <= REASON_WIDTH else reason[: REASON_WIDTH - 3] + "..."


def write_json(path: Path, rows: Sequence[Row]) -> None:
    path.write_text(json.dumps([dataclasses.asdict(row) for row in rows], indent=2) + "\n")
