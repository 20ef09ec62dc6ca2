"""The runner's output: a plain-text table for people (also valid Markdown, so a run can be pasted
into docs/conformance.md), the rows as JSON for tools, and the CI verdict."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from .rows import GATING, Row

#: Longest reason shown in the table; the JSON keeps the whole reason.
REASON_WIDTH = 210


def failing(rows: Sequence[Row]) -> list[Row]:
    """The rows that fail a CI gate: failed, crashed, timed out, silently skipped."""
    return [row for row in rows if row.result in GATING]


def format_table(rows: Sequence[Row]) -> str:
    """The rows as a table; rows compared with a native run (the `tpu` suite) also show what
    the emulated identity did and the native result, and the count of untouched tests."""
    compared = any(row.native for row in rows)
    cells = [
        (row.id, row.mode, row.result, f"{row.seconds:.1f}", _cell(row.reason))
        + ((row.identity or "-", _cell(row.native)) if compared else ())
        for row in rows
    ]
    header = ("test", "mode", "result", "seconds", "reason") + (
        ("identity", "natively") if compared else ()
    )
    widths = [max(len(r[i]) for r in [header, *cells]) for i in range(len(header))]

    def line(values: Sequence[str]) -> str:
        padded = (
            v.rjust(w) if i == 3 else v.ljust(w) for i, (v, w) in enumerate(zip(values, widths))
        )
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    counts = Counter(row.result for row in rows)
    total = ", ".join(f"{n} {result}" for result, n in sorted(counts.items()))
    if compared:
        touched = Counter(row.identity for row in rows if row.identity)
        changes = [f"{k} {n}" for k, n in sorted(touched.items())]
        changes.append(f"leaves {len(rows) - sum(touched.values())} untouched")
        total += "; the identity " + ", ".join(changes)
    return "\n".join([line(header), rule, *map(line, cells), "", f"{len(rows)} rows: {total}"])


def _cell(reason: str) -> str:
    reason = " ".join(reason.split()).replace("|", "\\|")
    return reason if len(reason) <= REASON_WIDTH else reason[: REASON_WIDTH - 3] + "..."


def write_json(path: Path, rows: Sequence[Row]) -> None:
    """Write the rows to `path` as a JSON list of objects, every field whole (`--json`): for
    tools, where the table shortens reasons.

    Args:
        path: the file to write; overwritten.
        rows: the run's rows, in order.
    """
    path.write_text(json.dumps([dataclasses.asdict(row) for row in rows], indent=2) + "\n")


def print_progress(rows: Sequence[Row]) -> None:
    """One line per row on stderr as a run finishes (the table comes at the end)."""
    for row in rows:
        print(f"    {row.result}: {row.id}  {row.reason}", file=sys.stderr, flush=True)


def finish(rows: Sequence[Row], json_path: Path | None) -> int:
    """Print the table, write the rows to `json_path` if given; the exit status: 1 when a row
    fails the gate, else 0.

    Args:
        rows: every row of the run.
        json_path: the file `--json` named, or None to write no JSON.
    """
    print(format_table(rows))
    if json_path:
        write_json(json_path, rows)
    return 1 if failing(rows) else 0
