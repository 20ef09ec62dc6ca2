"""Coverage counts what ranks run (issue 33 item 3), in every mode, through coverage.py's own
subprocess support (xlasim/ranks/rank_coverage.py).

The fixture project fixtures/ranked_project has a package whose even and odd ranks take
different branches, a rank that ends its process with `os._exit` and one that hangs past its
test's timeout. Measured at 8 cores in the default mode (a process per core) and in the
threads mode, the line and branch reports must be equal: what the ranks ran, the crashed and
the hung rank's lines included, and only the line no rank reaches missing. The same tests as
SPMD tests (spmd_ranked.py, every device's branch taken in the SPMD worker) give the threads
mode's report too, as does a test file that turns SPMD on itself (spmd_file_ranked.py, in a child
pytest session), and so does each machine of a pod of 2 (network namespaces) for the ranks of
both machines.
"""

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from fixtures import namespaces
from xlasim.ranks import rank_coverage

PROJECT = Path(__file__).parents[2] / "fixtures" / "ranked_project"
PARITY = "ranked/parity.py"
MODES = {"default": (), "threads": ("--xla-processes=1",)}
#: How test_ranked.py's tests end: rank 1 ends its process in one, rank 2 hangs in another.
RANKED_OUTCOMES = {"passed": 3, "failed": 2}


def _line_of(text: str) -> int:
    """The line of ranked/parity.py that holds `text` (the assertions do not hard-code lines)."""
    lines = (PROJECT / PARITY).read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if text in line)


def _measured(report: Path) -> dict[str, dict[str, list]]:
    """What a `coverage json` report says of each file: lines and branches, run and missed."""
    files = json.loads(report.read_text())["files"]
    kinds = ("executed_lines", "missing_lines", "executed_branches", "missing_branches")
    return {name: {kind: data[kind] for kind in kinds} for name, data in files.items()}


def _check_ranks_counted(measured: dict[str, dict[str, list]]) -> None:
    """Only the line no rank reaches is missing; the lines only some ranks run are counted."""
    parity = measured[PARITY]
    assert parity["missing_lines"] == [_line_of('kind = "unreachable"')], parity
    for only_some_ranks in ('kind = "odd"', 'kind += ", the third"', "os._exit(3)", ".wait()"):
        assert _line_of(only_some_ranks) in parity["executed_lines"], only_some_ranks


@pytest.fixture
def project(pytester: pytest.Pytester, inner_environment: pytest.MonkeyPatch) -> Path:
    shutil.copytree(PROJECT, pytester.path, dirs_exist_ok=True)
    inner_environment.setenv("PYTHONPATH", str(pytester.path), prepend=os.pathsep)
    return pytester.path


def _pytest_cov(
    pytester: pytest.Pytester, mode: str, *options: str, outcomes: dict[str, int]
) -> dict[str, dict[str, list]]:
    """`pytest --cov=ranked --cov-branch` of the project with `options`, as `_measured` says;
    pytest-cov must have combined every data file the ranks' processes wrote.

    Args:
        pytester: the project's pytester.
        mode: names the report (and the failure).
        options: the inner session's further options and paths.
        outcomes: the inner session's outcomes (`assert_outcomes`'s arguments).
    """
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--cov=ranked", "--cov-branch",
        f"--cov-report=json:{mode}.json", *options, timeout=300,
    )  # fmt: skip
    result.assert_outcomes(**outcomes)
    left = sorted(path.name for path in pytester.path.glob(".coverage.*"))
    assert not left, f"{mode}: data files written after pytest-cov combined: {left}"
    return _measured(pytester.path / f"{mode}.json")


def _reports(
    pytester: pytest.Pytester, runs: dict[str, tuple[str, ...]], outcomes: dict[str, int]
) -> dict[str, dict[str, dict[str, list]]]:
    """`_pytest_cov` of each run (name: options), by name; each ends with `outcomes`."""
    return {mode: _pytest_cov(pytester, mode, *o, outcomes=outcomes) for mode, o in runs.items()}


def _check_branches_of_some_ranks(measured: dict[str, dict[str, list]]) -> None:
    """The lines only odd ranks, rank 3 and the ranks given a negative value run are counted."""
    executed = measured[PARITY]["executed_lines"]
    for only_some_ranks in ('kind = "odd"', 'kind += ", the third"', "continue"):
        assert _line_of(only_some_ranks) in executed, only_some_ranks


def test_workers_measure_in_parallel_and_save_on_exit() -> None:
    """The configuration workers get: the launching process's, with a data file per process
    and saved when a rank ends its process or the worker is stopped with SIGTERM."""
    from coverage.config import CoverageConfig

    config = CoverageConfig()
    config.branch = True
    config.patch = ["subprocess"]
    workers = CoverageConfig.deserialize(rank_coverage.for_workers(config))
    assert (workers.branch, workers.parallel, workers.sigterm) == (True, True, True)
    assert workers.patch == ["_exit", "subprocess"]


@pytest.mark.slow
def test_pytest_cov_counts_the_ranks(pytester: pytest.Pytester, project: Path) -> None:
    """`pytest --cov --cov-branch`: the default mode's report is the threads mode's."""
    runs = {mode: ("--xla-devices=8", *options) for mode, options in MODES.items()}
    measured = _reports(pytester, runs, RANKED_OUTCOMES)
    _check_ranks_counted(measured["default"])
    assert measured["default"] == measured["threads"]


@pytest.mark.slow
def test_pytest_cov_counts_the_spmd_worker(pytester: pytest.Pytester, project: Path) -> None:
    """`pytest --cov --cov-branch` of test_ranked.py's tests as SPMD tests (spmd_ranked.py:
    each runs in the SPMD worker, for every device in turn; the worker ends its process in
    one and hangs in another, and is replaced): the report is the threads mode's of
    test_ranked.py."""
    runs = {
        "spmd": ("--xla-devices=8", "spmd_ranked.py"),
        "threads": ("--xla-devices=8", *MODES["threads"], "test_ranked.py"),
    }
    measured = _reports(pytester, runs, RANKED_OUTCOMES)
    _check_ranks_counted(measured["spmd"])
    assert measured["spmd"] == measured["threads"]


@pytest.mark.extended  # ~40 s; CI's coverage step runs the SPMD worker's test, not this one
def test_pytest_cov_counts_an_spmd_files_child_session(
    pytester: pytest.Pytester, project: Path
) -> None:
    """`pytest --cov --cov-branch` of a test file that turns SPMD on itself
    (spmd_file_ranked.py, run in a child pytest session of its own): the report is the threads
    mode's of test_ranked.py's same tests."""
    runs = {
        "spmd_file": ("--xla-devices=8", "spmd_file_ranked.py"),
        "threads": (
            "--xla-devices=8",
            *MODES["threads"],
            "-k",
            "parity or total",
            "test_ranked.py",
        ),
    }
    measured = _reports(pytester, runs, {"passed": 2})
    _check_branches_of_some_ranks(measured["spmd_file"])
    assert measured["spmd_file"] == measured["threads"]


def _coverage_run(pytester: pytest.Pytester, mode: str, *command: str) -> Path:
    """`coverage run` of `command` in parallel mode, combined, as a JSON report."""
    coverage = (sys.executable, "-m", "coverage")
    data = f"--data-file=.coverage.{mode}"
    pytester.run(*coverage, "run", data, "-p", "--branch", "--source=ranked", *command, timeout=300)
    combined = pytester.run(*coverage, "combine", data, timeout=120)
    assert combined.ret == 0, combined.stdout.str()
    report = pytester.run(*coverage, "json", data, "-o", f"{mode}.json", timeout=120)
    assert report.ret == 0, report.stdout.str()
    return pytester.path / f"{mode}.json"


@pytest.mark.slow
def test_coverage_run_of_pytest_counts_the_ranks(pytester: pytest.Pytester, project: Path) -> None:
    """`coverage run -p -m pytest`, combined: the default mode's report is the threads mode's."""
    measured = {}
    for mode, options in MODES.items():
        command = ("-m", "pytest", "-p", "no:cacheprovider", "--xla-devices=8", *options)
        measured[mode] = _measured(_coverage_run(pytester, mode, *command))
    _check_ranks_counted(measured["default"])
    assert measured["default"] == measured["threads"]


@pytest.mark.slow
def test_coverage_run_of_xlasim_run_counts_the_ranks(
    pytester: pytest.Pytester, project: Path
) -> None:
    """`coverage run -p -m xlasim run`, combined: the script's ranks, as in the threads mode."""
    measured = {}
    for mode, options in {"default": (), "threads": ("--processes", "1")}.items():
        command = ("-m", "xlasim", "run", "--devices", "8", *options, "run_ranked.py")
        measured[mode] = _measured(_coverage_run(pytester, mode, *command))
    _check_branches_of_some_ranks(measured["default"])
    assert measured["default"] == measured["threads"]


@pytest.mark.slow
def test_pytest_cov_counts_the_native_backends_workers(
    pytester: pytest.Pytester, project: Path, inner_environment: pytest.MonkeyPatch
) -> None:
    """`pytest --xla-backend=native --cov` (a TPU VM's code path) on two CPU devices: the
    worker `xmp.spawn` started counts what both ranks ran, each in a thread of its own that
    started before the measurement (as on a TPU v2/v3 VM), as the emulated threads mode does."""
    inner_environment.setenv("PJRT_DEVICE", "CPU")
    inner_environment.setenv("CPU_NUM_DEVICES", "2")
    runs = {
        "native": ("--xla-backend=native", "-k", "parity or total"),
        "threads": ("--xla-devices=2", *MODES["threads"], "-k", "parity or total"),
    }
    measured = _reports(pytester, runs, {"passed": 2})
    parity = measured["native"][PARITY]["executed_lines"]
    for ran in ('kind = "even"', 'kind = "odd"', "continue", "total += value"):
        assert _line_of(ran) in parity, ran
    assert measured["native"] == measured["threads"]


#: The pod of test_pod_pytest.py: 4 cores, a process each, on 2 hosts, one host per machine
#: (ranks 0-1 on machine 0, ranks 2-3 on machine 1).
POD_SLICE = ("--xla-devices=4", "--xla-processes=4", "--xla-hosts=2")
POD_PORT = 29780
POD_BOUND_S = 300


def _on_machine(measured: dict[str, dict[str, list]], project: Path) -> dict[str, dict[str, list]]:
    """A machine's report with its files named from the project, as the reference's are (a
    machine works in a directory of its own, so coverage.py names them by absolute path)."""
    return {os.path.relpath(name, project): data for name, data in measured.items()}


@pytest.mark.slow
def test_pytest_cov_counts_every_machine_of_a_pod(pytester: pytest.Pytester, project: Path) -> None:
    """`pytest --cov --cov-branch` on each of 2 machines of a pod (network namespaces, each
    working in a directory of its own): each machine's report counts what both machines' ranks
    ran (rank 3, on machine 1 only, takes a branch of its own), as the threads mode's does for
    the same tests on one machine."""
    namespaces.require()
    selection = ("-k", "parity or total", str(project / "test_ranked.py"))
    reference = _pytest_cov(
        pytester,
        "threads",
        "--xla-devices=4",
        *MODES["threads"],
        *selection,
        outcomes={"passed": 2},
    )
    pod = namespaces.Machines(2)
    try:
        started = []
        for machine in range(2):
            argv = [
                sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *POD_SLICE,
                "--xla-machines=2", f"--xla-machine-rank={machine}",
                f"--xla-rendezvous={pod.address(0)}:{POD_PORT}", "--xla-token=pod-coverage",
                "--cov=ranked", "--cov-branch", f"--cov-report=json:{project / f'm{machine}.json'}",
                *selection,
            ]  # fmt: skip
            started.append(pod.start(machine, argv, project / f"m{machine}"))
        for machine, process in enumerate(started):
            namespaces.wait_succeeded(process, project / f"m{machine}", POD_BOUND_S)
        left = [sorted(p.name for p in where.glob(".coverage.*")) for where in pod.directories]
    finally:
        pod.close()
    assert left == [[], []], f"data files written after pytest-cov combined: {left}"
    for machine in range(2):
        measured = _on_machine(_measured(project / f"m{machine}.json"), project)
        _check_branches_of_some_ranks(measured)
        assert measured == reference, f"machine {machine}"
