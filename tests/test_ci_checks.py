"""CI's own checks (fixtures/ci.py) turn a step that ran nothing into a red step.

Each case runs a real pytest session in a subprocess over a small test file of its own, with the
checks loaded as a plugin (`-p fixtures.ci`), and reads its exit status: a floor above what ran,
a module skipped at collection and a missing need fail with XLASIM_CI=1 and skip without it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.ci import CI_VARIABLE

ROOT = Path(__file__).resolve().parents[1]

TWO_TESTS = """
def test_one():
    assert 1 + 1 == 2

def test_two():
    assert "ci"
"""

MISSING_EXTRA = """
import pytest
pytest.importorskip("a_module_no_extra_provides")

def test_never_collected():
    pass
"""

NEEDS_NAMESPACES = """
from fixtures import ci

def test_needs_what_is_missing():
    ci.need("the `ip` command is not installed", "network namespaces")

def test_needs_what_is_there():
    ci.need(None, "network namespaces")
"""


def session(tmp_path: Path, source: str, *options: str, ci: bool) -> subprocess.CompletedProcess:
    """A pytest session over `source` with CI's checks, in CI or on a developer's machine."""
    (tmp_path / "test_case.py").write_text(source)
    environment = {key: value for key, value in os.environ.items() if key != CI_VARIABLE}
    environment["PYTHONPATH"] = str(ROOT)
    if ci:
        environment[CI_VARIABLE] = "1"
    command = [sys.executable, "-m", "pytest", "-p", "fixtures.ci", "-p", "no:cacheprovider"]
    command += ["-p", "no:xlasim", "-rA", "--rootdir", str(tmp_path), *options, "test_case.py"]
    return subprocess.run(
        command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(("floor", "status"), [(2, 0), (3, 1)])
def test_a_step_that_runs_fewer_tests_than_its_floor_fails(tmp_path, floor, status):
    result = session(tmp_path, TWO_TESTS, f"--min-tests={floor}", ci=True)
    assert result.returncode == status, result.stdout
    said = f"2 tests ran, fewer than this step's floor of {floor}"
    assert (said in result.stdout) == (status == 1)


def test_a_step_whose_tests_are_all_deselected_fails(tmp_path):
    result = session(tmp_path, TWO_TESTS, "--min-tests=1", "-k", "nothing_matches", ci=True)
    assert result.returncode == 1, result.stdout
    assert "0 tests ran, fewer than this step's floor of 1" in result.stdout


@pytest.mark.parametrize(
    ("ci", "status"),
    [(False, pytest.ExitCode.NO_TESTS_COLLECTED), (True, pytest.ExitCode.INTERRUPTED)],
)
def test_a_module_skipped_at_collection_is_an_error_in_ci_only(tmp_path, ci, status):
    result = session(tmp_path, MISSING_EXTRA, ci=ci)
    assert result.returncode == status, result.stdout
    if ci:
        assert "skipped as it was collected in CI" in result.stdout
        assert "a_module_no_extra_provides" in result.stdout
    else:
        assert "1 skipped" in result.stdout


@pytest.mark.parametrize(("ci", "summary"), [(False, "1 passed, 1 skipped"), (True, "1 failed")])
def test_a_missing_need_skips_on_a_laptop_and_fails_in_ci(tmp_path, ci, summary):
    result = session(tmp_path, NEEDS_NAMESPACES, ci=ci)
    assert summary in result.stdout, result.stdout
    assert "needs network namespaces: the `ip` command is not installed" in result.stdout
