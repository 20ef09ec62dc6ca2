"""`xlasim trace diff` names a planted divergence: one rank takes another branch.

`fixtures/traced_programs.py::branching_program`: three all_reduces; at the second (collective
#1), rank 1 calls from another line, or with another shape (the run then fails, and its trace
is written up to the failure).
"""

from __future__ import annotations

import inspect

import pytest

from fixtures import traced_programs
from xlasim.base.errors import CollectiveMismatchError
from xlasim.cli import main


def _line_of(text: str) -> int:
    source, first = inspect.getsourcelines(traced_programs.branching_program)
    return first + next(i for i, line in enumerate(source) if text in line)


def test_equal_traces_exit_zero(record, world, tmp_path, capsys):
    first = record(world, traced_programs.branching_program, (-1, False), tmp_path / "a")
    second = record(world, traced_programs.branching_program, (-1, False), tmp_path / "b")
    assert main(["trace", "diff", str(first), str(second)]) == 0
    assert "the same" in capsys.readouterr().out


def test_a_branch_from_another_line(record, world, tmp_path, capsys):
    same = record(world, traced_programs.branching_program, (-1, False), tmp_path / "same")
    branched = record(world, traced_programs.branching_program, (1, False), tmp_path / "branch")
    assert main(["trace", "diff", str(same), str(branched / "collectives.txt")]) == 1
    out = capsys.readouterr().out
    assert out.startswith("first divergence: rank 1, collective #1\n"), out
    ours, theirs = _line_of("# the common branch"), _line_of("# the other branch")
    assert ours != theirs
    assert f"at fixtures/traced_programs.py:{ours} in branching_program" in out
    assert f"at fixtures/traced_programs.py:{theirs} in branching_program" in out
    assert out.count("all_reduce #1 in [0, 1, 2, 3]") == 2


def test_a_branch_that_calls_another_shape(record, world, tmp_path, capsys):
    same = record(world, traced_programs.branching_program, (-1, False), tmp_path / "same")
    with pytest.raises(CollectiveMismatchError) as raised:
        record(world, traced_programs.branching_program, (1, True), tmp_path / "branch")
    assert str(tmp_path / "branch" / "trace.json") in str(raised.value)
    assert main(["trace", "diff", str(same), str(tmp_path / "branch")]) == 1
    out = capsys.readouterr().out
    assert out.startswith("first divergence: rank 1, collective #1\n"), out
    assert "[float32[4]] 16 B" in out and "[float32[8]] 32 B" in out
