"""The conformance runner (`xlasim conformance`), on small test files of our own written in the
style of torch_xla's (no upstream checkout needed), and its classification on made-up outputs.

One runner process runs the fixture tree once (each file in its own subprocess, ~5 s apiece);
the tests below read its table, JSON and logs. The hanging file gets its own short-timeout run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from xlasim.conformance.classify import KNOWN_BUG, NEEDS_TPU_HARDWARE, classify, failure
from xlasim.conformance.discovery import PYTEST, SCRIPT, TorchXlaJob, discover, modes
from xlasim.runners.execution import Outcome
from xlasim.runners.jobs import run_without_crashes
from xlasim.runners.reasons import first_error_line, unittest_summary
from xlasim.runners.rows import CRASHED, FAILED, NEEDS_PACKAGE, PASSED, SILENT_SKIP, Row
from xlasim.runners.table import failing

#: Two cores as threads of one process: the cheapest slice on which collectives mean something.
SLICE = ("--devices", "2", "--processes", "1")

ALL_REDUCE = """
import sys
import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr


def _mp_fn(index):
  device = torch_xla.device()
  value = torch.ones(3, device=device) * (index + 1)
  total = xm.all_reduce(xm.REDUCE_SUM, value).cpu()
  n = xr.world_size()
  if not torch.equal(total, torch.full((3,), n * (n + 1) / 2)):
    print(f'[{index}] xm.all_reduce() produced {total}', file=sys.stderr)
    sys.exit(1)


if __name__ == '__main__':
  torch_xla.launch(_mp_fn, args=())
"""

# Gated on hardware the emulation does not claim to be, with a message that is not one of
# torch_xla's: only the run's counts can tell that it checked nothing.
GATED = """
import sys
import torch
import torch_xla
import torch_xla.core.xla_model as xm


def _mp_fn(index):
  device = torch_xla.device()
  if xm.xla_device_hw(device) in ('NEURON',):
    xm.all_reduce(xm.REDUCE_SUM, torch.ones(2, device=device))
  else:
    print(f'{device}: nothing to check here', file=sys.stderr)


if __name__ == '__main__':
  torch_xla.launch(_mp_fn, args=())
"""

FAILS = """
import torch
import torch_xla
import torch_xla.core.xla_model as xm


def _mp_fn(index):
  gathered = xm.all_gather(torch.tensor([index], device=torch_xla.device()), dim=0).cpu()
  assert gathered.tolist() == [0], f'all_gather gave {gathered.tolist()}'


if __name__ == '__main__':
  torch_xla.launch(_mp_fn, args=())
"""

HANGS = """
import time
import torch_xla


def _mp_fn(index):
  print(f'rank {index} waiting for a peer that never comes', flush=True)
  time.sleep(600)


if __name__ == '__main__':
  torch_xla.launch(_mp_fn, args=())
"""

PYTEST_STYLE = """
import os

import pytest
import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr


def _all_gather(index):
  gathered = xm.all_gather(torch.tensor([index], device=torch_xla.device()), dim=0).cpu()
  assert gathered.tolist() == list(range(xr.world_size()))


def _returns_early(index):
  torch_xla.device()


def _wrong(index):
  total = xm.all_reduce(xm.REDUCE_SUM, torch.ones(1, device=torch_xla.device())).cpu()
  assert total.item() == 0, f'sum was {total.item()}'


def test_aborts():
  os.abort()  # as XLA does on a collective that cannot complete


def test_all_gather():
  torch_xla.launch(_all_gather, args=())


def test_returns_early():
  torch_xla.launch(_returns_early, args=())


@pytest.mark.skip(reason='needs a second slice')
def test_multislice():
  pass


def test_wrong_sum():
  torch_xla.launch(_wrong, args=())
"""


def _runner(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLASIM_", "PYTEST_"))}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "xlasim",
            "conformance",
            str(root),
            *SLICE,
            *args,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A miniature torch_xla test/ directory."""
    root = tmp_path_factory.mktemp("xla") / "test"
    (root / "torch_distributed").mkdir(parents=True)
    files = {
        "test_mp_all_reduce.py": ALL_REDUCE,
        "test_mp_gated.py": GATED,
        "test_mp_fails.py": FAILS,
        "torch_distributed/test_pytest_style.py": PYTEST_STYLE,
        "test_operations.py": "raise SystemExit('not in the mp suite')\n",
    }
    for name, text in files.items():
        (root / name).write_text(text)
    return root


@pytest.fixture(scope="module")
def run(tree: Path, tmp_path_factory: pytest.TempPathFactory):
    """One runner run over the tree: (the runner's process, rows by id, its logs directory)."""
    out = tmp_path_factory.mktemp("out")
    done = _runner(
        tree, "--timeout", "120", "--json", str(out / "rows.json"), "--logs", str(out / "logs")
    )
    rows = json.loads((out / "rows.json").read_text())
    return done, {row["id"]: row for row in rows}, out / "logs"


def test_discovery_takes_the_mp_suite_in_both_modes(tree: Path) -> None:
    jobs = [(job.rel, job.mode) for job in discover(tree, "mp")]
    assert jobs == [
        ("test_mp_all_reduce.py", SCRIPT),
        ("test_mp_fails.py", SCRIPT),
        ("test_mp_gated.py", SCRIPT),
        ("torch_distributed/test_pytest_style.py", PYTEST),
    ]
    assert [job.rel for job in discover(tree, "mp", "gated")] == ["test_mp_gated.py"]


def test_a_script_that_all_reduces_and_checks_passes_with_its_counts(run) -> None:
    _, rows, logs = run
    row = rows["test_mp_all_reduce.py"]
    assert (row["result"], row["mode"]) == (PASSED, SCRIPT), row
    assert row["reason"] == "1 launch, 1 collectives (all_reduce 1)"
    report = json.loads((logs / "test_mp_all_reduce.py.script" / "run-report.json").read_text())
    assert report == {"status": 0, "launches": 1, "collectives": {"all_reduce": 1}}


def test_a_hardware_gated_script_that_exits_0_is_a_silent_skip(run) -> None:
    row = run[1]["test_mp_gated.py"]
    assert row["result"] == SILENT_SKIP, row
    assert row["reason"] == "ran no checks: 1 launch, 0 collectives"


def test_a_failing_assertion_is_a_failure_with_its_message(run) -> None:
    _, rows, logs = run
    row = rows["test_mp_fails.py"]
    assert row["result"] == FAILED, row
    assert "AssertionError: all_gather gave [0, 1]" in row["reason"]
    report = json.loads((logs / "test_mp_fails.py.script" / "run-report.json").read_text())
    assert report["status"] == 1


def test_pytest_mode_reports_each_test(run) -> None:
    rows = run[1]
    file = "torch_distributed/test_pytest_style.py"
    got = {
        id.split("::", 1)[1]: (row["mode"], row["result"])
        for id, row in rows.items()
        if id.startswith(file)
    }
    assert got == {
        "test_aborts": (PYTEST, CRASHED),  # then the file ran again without it
        "test_all_gather": (PYTEST, PASSED),
        "test_returns_early": (PYTEST, SILENT_SKIP),
        "test_multislice": (PYTEST, "skipped"),
        "test_wrong_sum": (PYTEST, FAILED),
    }
    assert (
        rows[f"{file}::test_aborts"]["reason"] == "killed by SIGABRT: Fatal Python error: Aborted"
    )
    assert rows[f"{file}::test_multislice"]["reason"] == "needs a second slice"
    assert "sum was 2.0" in rows[f"{file}::test_wrong_sum"]["reason"]
    assert rows[f"{file}::test_returns_early"]["reason"] == "ran no checks: 1 launch, 0 collectives"


def test_table_and_exit_status_gate_on_failures_and_silent_skips(run) -> None:
    done, rows, _ = run
    assert done.returncode == 1, done.stderr[-3000:]
    assert "test_operations.py" not in done.stdout  # not in the mp suite
    header = done.stdout.splitlines()[0].split("|")
    assert [cell.strip() for cell in header[1:-1]] == [
        "test",
        "mode",
        "result",
        "seconds",
        "reason",
    ]
    for id, row in rows.items():
        assert f"| {id} " in done.stdout and row["result"] in done.stdout


def test_only_failures_crashes_timeouts_and_silent_skips_gate() -> None:
    def rows(*results: str) -> list[Row]:
        return [Row(f"t{i}", SCRIPT, r, 1.0, "") for i, r in enumerate(results)]

    benign = rows(PASSED, "skipped", NEEDS_PACKAGE, "needs TPU", KNOWN_BUG)
    assert failing(benign) == []
    for bad in (FAILED, CRASHED, "timed out", SILENT_SKIP):
        assert [row.result for row in failing([*benign, *rows(bad)])] == [bad]


def test_a_hanging_file_is_killed_at_the_timeout(tmp_path: Path) -> None:
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_mp_hangs.py").write_text(HANGS)
    done = _runner(tmp_path / "test", "--timeout", "15", "--json", str(tmp_path / "rows.json"))
    (row,) = json.loads((tmp_path / "rows.json").read_text())
    assert row["result"] == "timed out", row
    assert row["reason"].startswith("killed after 15 s; last output: rank ")
    assert 15 <= row["seconds"] < 30
    assert done.returncode == 1


# Classification on made-up outcomes: cheap, and each branch on its own.


def _outcome(tmp_path: Path, status: int | None, output: str = "", **kw) -> Outcome:
    fields = dict(seconds=1.0, timeout=60.0, report=None, junit=None, started=[])
    fields.update(kw)
    return Outcome(status=status, output=output, log=tmp_path / "log", **fields)


def _job(tmp_path: Path, rel: str = "test_mp_x.py", mode: str = SCRIPT) -> TorchXlaJob:
    return TorchXlaJob(tmp_path, tmp_path / rel, mode, needs_collectives=True)


def test_modes_follow_the_entry_point_and_test_definitions() -> None:
    main = "if __name__ == '__main__':\n  torch_xla.launch(f)\n"
    case = "class T(parameterized.TestCase):\n  def test_a(self): pass\n"
    assert modes(main) == [SCRIPT]
    assert modes(case) == [PYTEST]
    assert modes(case + main) == [SCRIPT, PYTEST]
    assert modes("def test_a():\n  pass\n") == [PYTEST]
    assert modes("x = 1\n") == [SCRIPT]  # nothing to run: the table shows it checked nothing
    helper = "class TestHelper():\n  def test_a(self): pass\n"  # called by ranks, not pytest
    assert modes(helper + main) == [SCRIPT]


def test_a_run_that_never_launched_or_left_no_report_is_a_silent_skip(tmp_path: Path) -> None:
    job = _job(tmp_path)
    idle = _outcome(tmp_path, 0, report={"status": 0, "launches": 0, "collectives": {}})
    (row,) = classify(job, idle)
    assert (row.result, row.reason) == (
        SILENT_SKIP,
        "ran no checks: exited 0 without launching ranks",
    )
    (row,) = classify(job, _outcome(tmp_path, 0))  # no report: it left through os._exit
    assert (row.result, row.reason) == (
        SILENT_SKIP,
        "exited 0 without xlasim's counts of launches (left through os._exit?)",
    )


def test_torch_xla_skip_message_after_some_checks_is_a_silent_skip(tmp_path: Path) -> None:
    output = "Default device xla:0 is not a TPU device\nRan 2 tests in 3.0s\n\nOK\n"
    report = {"status": 0, "launches": 2, "collectives": {"all_reduce": 1}}
    (row,) = classify(_job(tmp_path), _outcome(tmp_path, 0, output, report=report))
    assert (row.result, row.reason) == (
        SILENT_SKIP,
        "exited 0 after printing 'Default device xla:0 is not a TPU device'; ran 2 tests: OK",
    )


def test_a_known_bug_needs_its_signature(tmp_path: Path) -> None:
    job = _job(tmp_path, "test_mp_rendezvous.py")
    bug = "Traceback (most recent call last):\nValueError: Only global rendezvous is supported\n"
    (row,) = classify(job, _outcome(tmp_path, 1, bug))
    assert row.result == KNOWN_BUG and "fails on a TPU too" in row.reason
    other = "Traceback (most recent call last):\n  File 'x'\nKeyError: 'ORD'\n"
    (row,) = classify(job, _outcome(tmp_path, 1, other))
    assert (row.result, row.reason) == (FAILED, "KeyError: 'ORD'")


def test_missing_optional_package_but_not_a_module_of_the_test_tree(tmp_path: Path) -> None:
    (tmp_path / "args_parse.py").write_text("")
    job = _job(tmp_path)
    vision = "ModuleNotFoundError: No module named 'torchvision.datasets'\n"
    (row,) = classify(job, _outcome(tmp_path, 1, vision))
    assert (row.result, row.reason) == (
        NEEDS_PACKAGE,
        "needs torchvision (No module named 'torchvision')",
    )
    for own in ("args_parse", f"{tmp_path.name}.pjrt"):  # a module of the tree, the tree itself
        error = (
            f"Traceback (most recent call last):\nModuleNotFoundError: No module named '{own}'\n"
        )
        (row,) = classify(job, _outcome(tmp_path, 1, error))
        assert row.result == FAILED, own


def test_a_pallas_kernel_failure_needs_a_tpu(tmp_path: Path) -> None:
    frame = (
        '  File "/v/site-packages/torch_xla/experimental/custom_kernel.py", line 248, in trace\n'
    )
    output = f"Traceback (most recent call last):\n{frame}" + (
        "ValueError: Only interpret mode is supported on CPU backend.\n"
    )
    (row,) = classify(_job(tmp_path), _outcome(tmp_path, 1, output))
    assert row.result == NEEDS_TPU_HARDWARE and "Pallas" in row.reason
    (row,) = classify(_job(tmp_path), _outcome(tmp_path, 1, "RuntimeError: TPU not found\n"))
    assert row.result == FAILED  # saying "TPU" is not proof
    # Nor is passing through the kernel code: its input checks run before any TPU code.
    unpack = "ValueError: not enough values to unpack (expected 2, got 1)\n"
    (row,) = classify(_job(tmp_path), _outcome(tmp_path, 1, f"Traceback:\n{frame}{unpack}"))
    assert row.result == FAILED


def test_a_crash_names_the_signal_and_xlas_fatal_line(tmp_path: Path) -> None:
    output = (
        "2026-11-23 18:19:10.508287: F external/xla/xla/service/rendezvous.cc:127] [id=1] "
        "Termination timeout for `all gather`\nFatal Python error: Aborted\n"
    )
    (row,) = classify(_job(tmp_path), _outcome(tmp_path, -6, output))
    assert row.result == CRASHED
    assert row.reason == "killed by SIGABRT: [id=1] Termination timeout for `all gather`"
    job = _job(tmp_path, mode=PYTEST)
    (row,) = classify(job, _outcome(tmp_path, -11, "", started=["a.py::test_1", "a.py::test_2"]))
    assert (row.id, row.reason) == ("a.py::test_2", "killed by SIGSEGV")


def test_a_bare_assert_is_reported_with_its_line(tmp_path: Path) -> None:
    message = "xlasim.RankFailedError[AssertionError]: ranks 0, 1, 2 of 3 raised AssertionError: "
    quoted = (  # as pytest quotes a rank's traceback in junit
        f"E           {message}\nE           Traceback (most recent call last):\n"
        'E             File "/x/test/pjrt/test_ops.py", line 164, in _all_reduce\n'
        "E               assert 'xla::AllReduce' in met.counter_names()\n"
        "E           AssertionError\n"
    )
    job = _job(tmp_path, "pjrt/test_ops.py", PYTEST)
    assert failure(job, "pjrt/test_ops.py::test_x", quoted, message) == (
        FAILED,
        "RankFailedError[AssertionError]: ranks 0-2 of 3 raised AssertionError at test_ops.py:164: "
        "assert 'xla::AllReduce' in met.counter_names()",
    )


def test_a_pytest_process_that_dies_after_its_report_adds_a_crash_row(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuites><testsuite><testcase classname="t.T" name="test_a" time="1.5">'
        '<properties><property name="xlasim_launches" value="1"/>'
        '<property name="xlasim_collectives" value="{&quot;all_reduce&quot;: 2}"/></properties>'
        "</testcase></testsuite></testsuites>"
    )
    job = _job(tmp_path, "t.py", PYTEST)
    rows = classify(job, _outcome(tmp_path, -6, "Fatal Python error: Aborted\n", junit=junit))
    assert [(r.id, r.result, r.reason) for r in rows] == [
        ("t.py::T::test_a", PASSED, "1 launch, 2 collectives (all_reduce 2)"),
        ("t.py", CRASHED, "killed by SIGABRT: Fatal Python error: Aborted"),
    ]


def test_a_collection_error_is_its_own_row_without_an_exit_status_row(tmp_path: Path) -> None:
    """pytest exits 2 ("Interrupted: 1 error during collection") when a file cannot be imported;
    junit's error case says why, and the status adds nothing (torch_xla's
    spmd/test_spmd_debugging.py imports the optional `rich`)."""
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuites><testsuite><testcase classname="" name="spmd.test_x" time="0.0">'
        '<error message="collection failure">spmd/test_x.py: ImportError while importing\n'
        "E   ModuleNotFoundError: No module named 'rich'</error>"
        "</testcase></testsuite></testsuites>"
    )
    job = _job(tmp_path, "spmd/test_x.py", PYTEST)
    output = "!!! Interrupted: 1 error during collection !!!\n"
    rows = classify(job, _outcome(tmp_path, 2, output, junit=junit))
    assert [(r.result, r.reason) for r in rows] == [
        (NEEDS_PACKAGE, "needs rich (No module named 'rich')")
    ]
    rows = classify(job, _outcome(tmp_path, 3, "INTERNALERROR> boom\n", junit=junit))
    assert [r.result for r in rows] == [NEEDS_PACKAGE, FAILED]  # not a collection's status


def test_first_error_line_prefers_xlasim_then_the_failing_test() -> None:
    assert first_error_line("noise\nxlasim: DeadlockError: rank 1 waits\nlater") == (
        "DeadlockError: rank 1 waits"
    )
    unittest = (
        "FAIL: test_sync (__main__.T)\n------\nTraceback (most recent call last):\n"
        '  File "t.py", line 3, in test_sync\n    assert x\nAssertionError: bad stats\n'
    )
    assert first_error_line(unittest) == "test_sync: AssertionError: bad stats"
    assert first_error_line("ERROR:absl:Test must be launched with torchrun!") == (
        "Test must be launched with torchrun!"
    )


def test_unittest_verdict_found_between_other_ranks_lines() -> None:
    """Every rank of a torchrun file runs unittest into one stream: another rank's lines may
    fall between "Ran N tests" and the verdict (seen once in a suite run)."""
    interleaved = "Ran 2 tests in 0.5s\n\n[rank 1 output]\nRan 2 tests in 0.6s\nOK\n\nOK\n"
    assert unittest_summary(interleaved) == "; ran 2 tests: OK"
    assert unittest_summary("Ran 3 tests in 1s\n\nFAILED (failures=1)\n") == (
        "; ran 3 tests: FAILED (failures=1)"
    )
    assert unittest_summary("Ran 3 tests in 1s\n\nOKAY then\n") == ""


@dataclasses.dataclass(frozen=True)
class _Deselecting:
    deselect: tuple[str, ...] = ()


def test_the_rerun_loop_stops_at_a_test_left_out_already_and_at_the_deadline() -> None:
    """The runners' one crash/rerun loop (xlasim/runners/jobs.py): each rerun leaves out one
    more crashed test; a test that crashes again although left out, or a spent budget, ends it
    (test_pytest_mode_reports_each_test runs it for real)."""
    runs: list[tuple[str, ...]] = []

    def crashes(*ids: str):
        def attempt(job: _Deselecting, timeout: float) -> str | None:
            runs.append(job.deselect)
            assert len(runs) <= len(ids), "the loop did not stop"
            return ids[len(runs) - 1]

        return attempt

    run_without_crashes(_Deselecting(), 60.0, crashes("a", "b", None))
    assert runs == [(), ("a",), ("a", "b")]
    runs.clear()
    run_without_crashes(_Deselecting(), 60.0, crashes("a", "a"))
    assert runs == [(), ("a",)]
    runs.clear()
    run_without_crashes(_Deselecting(), 0.0, crashes("a"))
    assert runs == [()]
