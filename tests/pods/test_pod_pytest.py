"""The plugin on a pod (docs/pods.md): `pytest --xla-machines=2 --xla-machine-rank=K
--xla-rendezvous=HOST:PORT --xla-token=T` on 2 machines in network namespaces, each running the
same collection over one emulated slice (4 cores on 2 hosts: ranks 0-1 on machine 0, 2-3 on
machine 1).

- The property suite's `xm` collective properties (all_reduce, all_gather, reduce_scatter,
  all_to_all, collective_permute, collective_broadcast and their compositions, over sub-worlds
  of 1-4 ranks) pass on both machines, every one run and none skipped: each example's ranks
  meet across machines and each machine's parent compares every rank's result with NumPy.
  The profile is Hypothesis' random one: the plugin must make both machines draw alike.
- Machines that collected different tests stop before any test runs, each naming the other
  machine and the first test that differs (a test on one machine only would leave the other's
  ranks waiting).

Slow (two pytest sessions on worker processes: ~20-40 s on 2 loaded cores): `-m slow`, CI step
"pods across machines".
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from fixtures.namespaces import Machines, wait_succeeded

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PROPERTIES = REPO / "tests" / "properties" / "test_xm_collective_properties.py"
PROPERTY_COUNT = 9
PORT = 29760
RUN_BOUND_S = 600


def _start(pod: Machines, tmp_path: Path, rank: int, *extra: str):
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",  # the machines share the checkout, not its cache
        "-p",
        "few_examples",
        "--hypothesis-profile=xla-few",
        "--xla-devices=4",
        "--xla-processes=4",
        "--xla-hosts=2",
        "--xla-machines=2",
        f"--xla-machine-rank={rank}",
        f"--xla-rendezvous={pod.address(0)}:{PORT}",
        "--xla-token=pod-test-token",
        f"--junitxml={tmp_path / f'm{rank}.xml'}",
        "-q",
        str(PROPERTIES),
        *extra,
    ]
    return pod.start(
        rank,
        argv,
        tmp_path / f"m{rank}",
        PYTHONPATH=str(Path(__file__).parent / "scripts"),
        XLASIM_TIMEOUT="60",
    )


def _passed(report: Path) -> list[str]:
    """The tests a machine's junit report says passed; it must hold nothing else."""
    cases = ElementTree.parse(report).getroot().iter("testcase")
    passed, other = [], []
    for case in cases:
        name = f"{case.get('classname')}::{case.get('name')}"
        (other if len(case) else passed).append(name)  # a child: failure, error or skipped
    assert other == [], f"{report}: not passed: {other}"
    return passed


def test_collective_properties_pass_on_two_machines(machines, tmp_path):
    pod = machines(2)
    started = [_start(pod, tmp_path, rank) for rank in range(2)]
    for rank, process in enumerate(started):
        wait_succeeded(process, tmp_path / f"m{rank}", RUN_BOUND_S)
    first, second = (_passed(tmp_path / f"m{rank}.xml") for rank in range(2))
    assert len(first) == PROPERTY_COUNT, first
    assert first == second


def test_machines_that_collect_different_tests_stop_naming_the_difference(machines, tmp_path):
    pod = machines(2)
    started = [
        _start(pod, tmp_path, 0),
        _start(pod, tmp_path, 1, "-k", "not ring_permute"),
    ]
    for process in started:
        process.wait(RUN_BOUND_S)
    errors = [(tmp_path / f"m{rank}.err").read_text() for rank in range(2)]
    assert [p.returncode for p in started] == [pytest.ExitCode.USAGE_ERROR] * 2, errors
    missing = "test_ring_permute_applied_world_size_times_is_identity'"
    assert (
        "PodCollectionError: machine 1 collected other tests than machine 0 (this one): "
        f"9 tests here, 8 there: 'tests/properties/test_xm_collective_properties.py::{missing} "
        "is not there"
    ) in errors[0]
    assert (
        "PodCollectionError: machine 0 collected other tests than machine 1 (this one): "
        "8 tests here, 9 there"
    ) in errors[1]
    assert not (tmp_path / "m0.xml").exists() or "testcase" not in (tmp_path / "m0.xml").read_text()
