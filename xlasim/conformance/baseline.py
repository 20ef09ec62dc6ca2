"""Comparing a `tpu` suite file's emulated rows with its native run, test by test.

The tests that matter in the `tpu` suite are the ones the emulated TPU identity changes; the
rest run natively on one CPU device too (torch_xla's CPU CI runs them there). Every emulated row
gets the native result next to it and one of these:

- `opens`: natively skipped (or not collected, or a script that printed "not a TPU device"),
  emulated it runs: its result is the emulation's to answer for.
- `closes`: natively it runs, emulated it is skipped, with upstream's reason ("Not supported
  on TPU"): what a TPU does too.
- `branches`: it runs both ways, but its body or decorators ask the identity (`gates`) and
  take the TPU's branch emulated (`if xla_device_hw(device) != 'TPU': return`).
- `unknown`: the native run timed out or crashed before it reported its tests.
- empty: untouched. Such a test that fails emulated as it fails natively is `fails natively
  too`, not a gate; one that passes natively and fails emulated stays a failure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..runners.rows import CRASHED, GATING, SILENT_SKIP, SKIPPED, TIMED_OUT, Row
from .classify import FAILS_NATIVELY
from .gates import Gates, is_gated

OPENS = "opens"
CLOSES = "closes"
BRANCHES = "branches"

#: Native results that mean "did not run": the identity opened the test if it runs emulated.
_NOT_RUN = frozenset({SKIPPED, SILENT_SKIP})


#: What a row says when the native run ended without per-test results (it timed out or
#: crashed before junit was written): nothing to compare with.
UNKNOWN = "unknown"


def compare(rows: Sequence[Row], native: Sequence[Row], gates: Gates) -> list[Row]:
    """`rows` (emulated) with what `native` rows say of the same ids: each row's `native` and
    `identity` filled in, and an untouched test that fails natively the same way marked
    `fails natively too`.

    Args:
        rows: the file's rows from its emulated run.
        native: the file's rows from its native run on one CPU device; a file-level row
            (no `::` in its id) that timed out or crashed makes every row `unknown`.
        gates: the file's TPU gates, to tell a test that takes the TPU's branch (`branches`).
    """
    lost = next((n for n in native if n.result in (TIMED_OUT, CRASHED) and "::" not in n.id), None)
    if lost is not None:
        natively = f"{lost.result}: {lost.reason}"
        return [dataclasses.replace(row, native=natively, identity=UNKNOWN) for row in rows]
    return [_compared(row, _native_of(row, native), gates) for row in rows]


def _native_of(row: Row, native: Sequence[Row]) -> list[Row]:
    """The native rows of `row`'s test: the one of its id; else its parameterized variants
    (`test_resnet180`, `test_resnet181`: a skip decorator above absl's `parameters` makes one
    skipped test of them on the TPU, as upstream's `skipOnTpu` does)."""
    exact = [n for n in native if n.id == row.id]
    if exact:
        return exact
    return [n for n in native if n.id.startswith(row.id) and n.id[len(row.id) :].isdigit()]


def _compared(row: Row, native: list[Row], gates: Gates) -> Row:
    natively = "; ".join(_described(n, row) for n in native) or "not run"
    identity = _identity(row, native, gates)
    result = row.result
    if (
        not identity
        and result in GATING
        and [(n.id, n.result, n.reason) for n in native] == [(row.id, result, row.reason)]
    ):
        result = FAILS_NATIVELY
    return dataclasses.replace(row, result=result, native=natively, identity=identity)


def _described(native: Row, row: Row) -> str:
    described = f"{native.result}: {native.reason}".rstrip(": ")
    if native.id == row.id:
        return described
    return f"{described} ({native.id.split('::')[-1]})"


def _identity(row: Row, native: list[Row], gates: Gates) -> str:
    ran = row.result != SKIPPED
    ran_natively = any(n.result not in _NOT_RUN for n in native)
    if ran and not ran_natively:
        return OPENS
    if not ran and ran_natively:
        return CLOSES
    if ran and is_gated(row.id, gates):
        return BRANCHES
    return ""
