"""`@pytest.mark.xla(spmd=True)`: SPMD tests interleaved with per-rank tests in one file.

SPMD runs in a worker process of its own; every other test, before and after, sees SPMD off
(`inner_spmd.py` checks `xr.is_spmd()` and `XLA_USE_SPMD` in the pytest process and on the
ranks), whatever the order and with pytest-xdist. A test that calls `xr.use_spmd()` without
asking fails with an error naming the marker; a failure, a crash and a hang of an SPMD test
are reported as such, and the next SPMD test gets a fresh worker.
"""

from pathlib import Path

import pytest

from xlasim.events import model

EMULATED = {
    "test_replica_first": "PASSED",
    "test_spmd_slice": "PASSED",
    "test_replica_between": "PASSED",
    "test_spmd_any_size": "PASSED",
    "test_spmd_given": "PASSED",
    "test_spmd_session_profile": "PASSED",
    "test_mesh_unmarked": "ERROR",
    "test_plain_calls_use_spmd": "FAILED",
    "test_rank_calls_use_spmd": "FAILED",
    "test_spmd_fails": "FAILED",
    "test_spmd_crashes": "FAILED",
    "test_spmd_hangs": "FAILED",
    "test_spmd_after_the_crash": "PASSED",
    "test_plain_last": "PASSED",
    "test_replica_last": "PASSED",
}

REFUSED = "*SpmdRefusedError: xr.use_spmd() called here: this pytest process runs every test*"
IN_RANK = "*SpmdRefusedError: xr.use_spmd() on emulated rank 0 of 8*@pytest.mark.xla(spmd=True)*"
REPORTS = [
    # A failure is rendered in the worker as pytest renders one, asserts rewritten.
    ">       assert devices == -1",
    "E       assert * == -1",
    "test_inner.py:*: AssertionError",
    "*SpmdWorkerError: the SPMD worker (pid *, * devices) was killed by SIGSEGV while running "
    "test_inner.py::test_spmd_crashes*",
    "*SpmdWorkerError: the SPMD worker (pid *) did not finish running "
    "test_inner.py::test_spmd_hangs within 5 s and was stopped*",
]


def test_emulated_slice(run_inner, pytester) -> None:
    root = Path(pytester.path) / "traces"
    result, got = run_inner("inner_spmd.py", "--xla-devices=8", f"--xla-trace={root}")
    assert got == EMULATED, result.stdout.str()
    result.stdout.fnmatch_lines([REFUSED, IN_RANK], consecutive=False)
    result.stdout.fnmatch_lines(REPORTS, consecutive=False)
    for test, ended in (("test_spmd_any_size", True), ("test_spmd_hangs", False)):
        directory = root / f"test_inner.py_{test}"
        assert (directory / "trace.json").exists(), test
        [events] = model.read_ranks(directory).values()
        spans = [(s.kind, s.fields.get("op"), s.end is not None) for s in model.spans(events)]
        assert spans == [("launch", None, ended), ("graph", "torch_xla.sync", True)], test


def test_xdist(run_inner) -> None:
    result, got = run_inner("inner_spmd.py", "--xla-devices=8", "-n", "2", "-p", "xdist")
    assert got == EMULATED, result.stdout.str()


def test_native_one_device(run_inner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    monkeypatch.setenv("CPU_NUM_DEVICES", "1")
    result, got = run_inner("inner_spmd.py", "--xla-backend=native")
    skipped = ("test_spmd_slice", "test_rank_calls_use_spmd")  # -rA names no skipped test
    assert got == {k: v for k, v in EMULATED.items() if k not in skipped}, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            REFUSED,
            "E       assert 1 == -1",
            "SKIPPED [[]1[]] test_inner.py:*: needs at least 8 XLA cores, this session has 1*",
            "SKIPPED [[]1[]] test_inner.py:*: natively a rank's process is xmp.spawn's",
        ],
        consecutive=False,
    )
