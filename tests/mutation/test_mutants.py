"""The mutation run's mutants still apply to the code (known bug 12: tests that could not fail
go unnoticed when their proof silently stops running). Pure Python: no ranks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from mutants import MUTANTS, SANITY, Mutant  # noqa: E402


@pytest.mark.parametrize("mutant", [*SANITY, *MUTANTS], ids=lambda m: m.name)
def test_bug12_every_mutant_still_applies(mutant: Mutant):
    patched = mutant.patched(ROOT)  # raises MutantDoesNotApply when the code moved on
    assert all(new != file.read_text() for file, new in patched.items())


def test_the_run_has_at_least_15_mutants_with_distinct_names():
    names = [m.name for m in MUTANTS]
    assert len(names) >= 15
    assert len(set(names)) == len(names)
