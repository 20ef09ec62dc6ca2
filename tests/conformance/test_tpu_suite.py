"""The conformance runner's `tpu` suite: torch_xla's test files with a TPU gate, each run
natively on one CPU device and emulated, every test's row saying what the TPU identity changed.

Small files of our own in the style of torch_xla's, no checkout: the gate finder on sources
written for each form of gate, the comparison on made-up rows, and one runner run over a
miniature tree (two files, each run twice, ~10 s apiece).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from xlasim.conformance import discovery
from xlasim.conformance.baseline import BRANCHES, CLOSES, OPENS, UNKNOWN, compare
from xlasim.conformance.classify import EMULATION_LIMIT, EXPECTED_FAILURE, FAILS_NATIVELY, failure
from xlasim.conformance.discovery import PYTEST, SCRIPT, TorchXlaJob, discover
from xlasim.conformance.execution import command, native_command
from xlasim.conformance.gates import find_gates, function_of, is_gated
from xlasim.runners import reasons
from xlasim.runners.execution import Slice
from xlasim.runners.rows import FAILED, NEEDS_PACKAGE, PASSED, SKIPPED, TIMED_OUT, Row
from xlasim.runners.table import failing, format_table


def _gated(source: str) -> frozenset[str]:
    gates = find_gates(ast.parse(source))
    assert gates.anywhere == bool(gates.functions) or not gates.functions
    return gates.functions


@pytest.mark.parametrize(
    "condition",
    [
        "xm.xla_device_hw(torch_xla.device()) != 'TPU'",
        "xr.device_type() == 'TPU'",
        "xr.device_type() in {'TPU', 'NEURON'}",
        "xr.device_type() != 'CPU'",
        "os.environ.get('PJRT_DEVICE') == 'TPU'",
        "tpu.version() < 4",
        "not test_utils.is_on_tpu()",
    ],
)
def test_every_form_of_tpu_gate_is_found(condition: str) -> None:
    source = f"class T(unittest.TestCase):\n  @unittest.skipIf({condition}, 'x')\n  def test_a(self): pass\n  def test_b(self): pass\n"
    assert _gated(source) == {"test_a"}


def test_gates_are_followed_through_variables_and_module_level_names() -> None:
    source = """
def _is_on_tpu():
  return xr.device_type() == 'TPU'

skipOnTpu = unittest.skipIf(_is_on_tpu(), 'Not supported on TPU')

class T(unittest.TestCase):
  @skipOnTpu
  def test_decorated(self): pass

  def test_in_body(self):
    hw = xm.xla_device_hw(torch_xla.device())
    if hw == "TPU":
      return

  def test_free(self): pass
"""
    assert _gated(source) == {"_is_on_tpu", "test_decorated", "test_in_body"}


def test_questions_that_are_not_tpu_gates_are_not_found() -> None:
    source = """
# runs on TPU only in CI
class T(unittest.TestCase):
  def test_cuda(self):
    if xr.device_type() == 'CUDA':
      return
  def test_name(self):
    self.assertIn('TPU', names)
"""
    gates = find_gates(ast.parse(source))
    assert (gates.anywhere, gates.functions) == (False, frozenset())


def test_a_gated_class_gates_its_tests() -> None:
    source = "@unittest.skipIf(xr.device_type() != 'TPU', 'x')\nclass T(unittest.TestCase):\n  def test_a(self): pass\n"
    assert _gated(source) == {"test_a"}


def test_a_parameterized_test_is_matched_to_its_function() -> None:
    gates = find_gates(
        ast.parse(
            "class T(unittest.TestCase):\n  def test_put(self): pass\n"
            "  def test_put_many(self): pass\n  def test_gmm(self): pass\n"
        )
    )
    assert function_of("test_put_xla_float32", gates) == "test_put"
    assert function_of("test_put_many_xla", gates) == "test_put_many"
    assert function_of("test_gmm0", gates) == "test_gmm"
    assert function_of("test_gmmx", gates) == "test_gmmx"  # no such function


def test_a_test_is_gated_by_its_own_class() -> None:
    gates = find_gates(
        ast.parse(
            "skipOnTpu = unittest.skipIf(xr.device_type() == 'TPU', 'x')\n"
            "class Inference(unittest.TestCase):\n  @skipOnTpu\n  def test_resnet(self): pass\n"
            "class Training(unittest.TestCase):\n  def test_resnet(self): pass\n"
        )
    )
    assert is_gated("f.py::Inference::test_resnet", gates)
    assert is_gated("f.py::Inference::test_resnet0", gates)  # a parameterized variant
    assert not is_gated("f.py::Training::test_resnet", gates)
    # a class the file does not define (torch's device-type classes): by the function's name
    assert is_gated("f.py::InferenceXLA::test_resnet_xla", gates)
    assert not is_gated("f.py::Training::test_other", gates)


def _row(id: str, result: str, reason: str = "") -> Row:
    return Row(id, PYTEST, result, 1.0, reason)


def test_the_comparison_names_what_the_identity_changed() -> None:
    gates = find_gates(
        ast.parse(
            "class T(unittest.TestCase):\n"
            "  def test_branch(self):\n    if xr.device_type() == 'TPU': return\n"
        )
    )
    emulated = [
        _row("f.py::T::test_opened", FAILED, "boom"),
        _row("f.py::T::test_new", PASSED),  # not collected natively
        _row("f.py::T::test_closed", SKIPPED, "Not supported on TPU"),
        _row("f.py::T::test_branch", PASSED),
        _row("f.py::T::test_both_fail", FAILED, "AssertionError: 1 != 2"),
        _row("f.py::T::test_regressed", FAILED, "OutsideWorldError"),
        _row("f.py::T::test_fine", PASSED),
    ]
    native = [
        _row("f.py::T::test_opened", SKIPPED, "This test only works on TPU."),
        _row("f.py::T::test_closed", PASSED),
        _row("f.py::T::test_branch", PASSED),
        _row("f.py::T::test_both_fail", FAILED, "AssertionError: 1 != 2"),
        _row("f.py::T::test_regressed", PASSED),
        _row("f.py::T::test_fine", PASSED),
    ]
    got = {
        r.id.split("::")[-1]: (r.result, r.identity, r.native)
        for r in compare(emulated, native, gates)
    }
    assert got == {
        "test_opened": (FAILED, OPENS, "skipped: This test only works on TPU."),
        "test_new": (PASSED, OPENS, "not run"),
        "test_closed": (SKIPPED, CLOSES, "passed"),
        "test_branch": (PASSED, BRANCHES, "passed"),
        "test_both_fail": (FAILS_NATIVELY, "", "failed: AssertionError: 1 != 2"),
        "test_regressed": (FAILED, "", "passed"),
        "test_fine": (PASSED, "", "passed"),
    }
    rows = compare(emulated, native, gates)
    assert [r.id.split("::")[-1] for r in failing(rows)] == ["test_opened", "test_regressed"]
    lost = [Row("f.py", PYTEST, TIMED_OUT, 900.0, "killed after 900 s")]
    unknown = compare(emulated, lost, gates)
    assert {r.identity for r in unknown} == {UNKNOWN}
    assert [r.result for r in unknown] == [r.result for r in emulated]
    summary = format_table(rows).splitlines()[-1]
    assert summary.endswith("the identity branches 1, closes 1, opens 2, leaves 3 untouched")
    untouched = format_table([rows[-1]]).splitlines()[-1]
    assert untouched.endswith("1 passed; the identity leaves 1 untouched")


def test_a_skip_above_a_parameterization_is_compared_with_its_native_variants() -> None:
    """`@skipOnTpu` above absl's `@parameterized.parameters`: natively `test_resnet0` and
    `test_resnet1` run; on the TPU one skipped `test_resnet` stands for both."""
    gates = find_gates(ast.parse("class T(unittest.TestCase):\n  def test_resnet(self): pass\n"))
    emulated = [_row("f.py::T::test_resnet", SKIPPED, "Not supported on TPU")]
    native = [
        _row("f.py::T::test_resnet0", PASSED),
        _row("f.py::T::test_resnet1", NEEDS_PACKAGE, "needs flax"),
        _row("f.py::T::test_resnet_lazy", PASSED),
    ]
    (row,) = compare(emulated, native, gates)
    assert (row.result, row.identity) == (SKIPPED, CLOSES)
    assert row.native == "passed (test_resnet0); needs package: needs flax (test_resnet1)"


# One runner run over a miniature tree.

OPENED = """
import unittest
import torch
import torch_xla
import torch_xla.runtime as xr
import torch_xla.core.xla_model as xm


class Gated(unittest.TestCase):

  @unittest.skipIf(xr.device_type() != 'TPU', 'This test only works on TPU.')
  def test_opened(self):
    t = torch.ones(3, device=torch_xla.device()) * 2
    self.assertEqual(t.sum().item(), 6.0)

  @unittest.skipIf(xr.device_type() != 'TPU', 'This test only works on TPU.')
  def test_opened_fails(self):
    self.assertEqual(xm.xla_device_hw(torch_xla.device()), 'GPU')

  @unittest.skipIf(xr.device_type() != 'TPU', 'This test only works on TPU.')
  @unittest.expectedFailure
  def test_opened_expected_failure(self):
    self.assertEqual(1, 2)

  @unittest.skipIf(xr.device_type() == 'TPU', 'Not supported on TPU')
  def test_closed(self):
    pass

  def test_untouched(self):
    self.assertEqual((torch.ones(2, device=torch_xla.device()) + 1).sum().item(), 4.0)

  def test_fails_everywhere(self):
    self.assertEqual(1, 2)


if __name__ == '__main__':
  unittest.main()
"""


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("xla") / "test"
    (root / "spmd").mkdir(parents=True)
    files = {
        "test_gated.py": OPENED,
        "test_ungated.py": "import unittest\nclass T(unittest.TestCase):\n  def test_a(self): pass\n",
        "test_utils.py": "def is_on_tpu():\n  return xr.device_type() == 'TPU'\n",
        "test_mp_x.py": "if xr.device_type() == 'TPU':\n  pass\nif __name__ == '__main__':\n  pass\n",
        "spmd/test_y.py": "import unittest\nclass T(unittest.TestCase):\n  @unittest.skipIf(xr.device_type() != 'TPU', 'x')\n  def test_a(self): pass\n",
        "dynamo/test_launch.py": "def _mp_fn(i):\n  if xm.xla_device_hw(d) != 'TPU':\n    return\n\nif __name__ == '__main__':\n  torch_xla.launch(_mp_fn)\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    # As in a checkout: test/ is a package, so pytest's prepend mode puts the checkout's root on
    # sys.path, where torch_xla's source folder must not shadow the installed package.
    (root / "__init__.py").write_text("")
    (root.parent / "torch_xla").mkdir()
    (root.parent / "torch_xla" / "__init__.py").write_text("raise ImportError('source folder')\n")
    return root


def test_the_tpu_suite_is_the_gated_files_no_other_suite_takes(tree: Path) -> None:
    jobs = [(job.rel, job.mode, job.baseline) for job in discover(tree, "tpu")]
    assert jobs == [("dynamo/test_launch.py", SCRIPT, True), ("test_gated.py", PYTEST, True)]
    assert [job.rel for job in discover(tree, "all") if job.baseline] == [
        "dynamo/test_launch.py",
        "test_gated.py",
    ]


def test_a_file_whose_tests_need_a_process_each_gets_a_job_per_test(tree, monkeypatch) -> None:
    """As torch_xla's TPU CI runs test_mat_mul_precision.py: one process per test, in its order."""
    tests = ("Gated::test_opened", "Gated::test_closed")
    monkeypatch.setitem(discovery.ONE_PROCESS_PER_TEST, "test_gated.py", tests)
    jobs = [job for job in discover(tree, "tpu") if job.rel == "test_gated.py"]
    assert [job.test for job in jobs] == list(tests)
    assert len({job.slug for job in jobs}) == 2
    for job, test in zip(jobs, tests):
        target = f"{tree / 'test_gated.py'}::{test}"
        assert target in command(job, Slice(1, None), tree / "junit.xml")
        assert target in native_command(job, tree / "junit.xml")


@pytest.fixture(scope="module")
def run(tree: Path, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("out")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLASIM_", "PYTEST_"))}
    options = ["--devices", "1", "-k", "test_gated", "--timeout", "240"]
    options += ["--json", str(out / "rows.json")]
    done = subprocess.run(
        [sys.executable, "-m", "xlasim", "conformance", str(tree), "--suite", "tpu", *options],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    rows = json.loads((out / "rows.json").read_text())
    return done, {row["id"].split("::")[-1]: row for row in rows}


def test_each_test_is_run_natively_and_emulated_and_compared(run) -> None:
    done, rows = run
    got = {name: (row["result"], row["identity"], row["native"]) for name, row in rows.items()}
    assert got == {
        "test_opened": (PASSED, OPENS, "skipped: This test only works on TPU."),
        "test_opened_fails": (FAILED, OPENS, "skipped: This test only works on TPU."),
        "test_opened_expected_failure": (
            EXPECTED_FAILURE,
            OPENS,
            "skipped: This test only works on TPU.",
        ),
        "test_closed": (SKIPPED, CLOSES, "passed"),
        "test_untouched": (PASSED, "", "passed"),
        "test_fails_everywhere": (
            FAILS_NATIVELY,
            "",
            f"failed: {rows['test_fails_everywhere']['reason']}",
        ),
    }, done.stderr[-3000:]
    assert "'TPU' != 'GPU'" in rows["test_opened_fails"]["reason"]


def test_an_opened_test_that_fails_fails_the_run(run) -> None:
    done, _ = run
    assert done.returncode == 1, done.stderr[-3000:]
    header = [cell.strip() for cell in done.stdout.splitlines()[0].split("|")[1:-1]]
    assert header[-2:] == ["identity", "natively"]
    assert done.stdout.rstrip().endswith("the identity closes 1, opens 3, leaves 2 untouched")


def test_a_documented_limit_of_emulation_is_named_only_on_its_signature(tmp_path: Path) -> None:
    job = TorchXlaJob(tmp_path, tmp_path / "dynamo/test_traceable_collectives.py", SCRIPT, True)
    output = 'Traceback ...\n    assert met.metric_data("ExecuteTime")[0] == 1\nAssertionError\n'
    result, reason = failure(job, job.rel, output, "AssertionError")
    assert result == EMULATION_LIMIT and "docs/fidelity.md#cannot-match" in reason
    assert failing([Row(job.rel, SCRIPT, result, 1.0, reason)]) == []
    other = failure(job, job.rel, "ValueError: wrong\n", "ValueError: wrong")
    assert other == (FAILED, "ValueError: wrong")


def test_torch_xlas_jax_feature_error_names_the_missing_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch_xla swallows the ImportError of torchax / jax and says only "Jax is required"; the
    reason names the package really missing, here one torchax imports (as the installed torchax
    imports flax, which was reported as "needs torchax")."""
    fakes = tmp_path / "fakes"
    for package, code in (("jax", ""), ("torchax", "import flax_of_this_test\n")):
        (fakes / package).mkdir(parents=True)
        (fakes / package / "__init__.py").write_text(code)
    monkeypatch.setenv("PYTHONPATH", str(fakes))
    reasons.jax_feature_blocker.cache_clear()
    job = TorchXlaJob(tmp_path, tmp_path / "test_assume_pure.py", PYTEST, False)
    output = "E   AssertionError: Jax is required for this feature\n"
    try:
        result, reason = failure(job, job.rel, output, "AssertionError: Jax is required")
    finally:
        reasons.jax_feature_blocker.cache_clear()
    assert (result, reason) == (
        NEEDS_PACKAGE,
        "needs flax_of_this_test (No module named 'flax_of_this_test')",
    )
