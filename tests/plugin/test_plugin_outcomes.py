"""One outcome type from rank to report: the plugin receives the same `RankOutcome` fields
whether the ranks are threads of the pytest process, worker processes of the core's world,
or the native backend's `xmp.spawn` workers, and reports a failure the same way."""

import json

SECTION = [
    "*_ test_last_rank_fails _*",
    "[[]rank 1/2[]] AssertionError: the last rank fails*",
    "*- [[]rank 1/2[]] -*",
    '>       assert value != xla_rank.world_size - 1, "the last rank fails"',
    "E       AssertionError: the last rank fails",
    "test_inner.py:*: AssertionError",
    "*- [[]rank 1/2[]] captured stdout -*",
    "hello from rank 1",
]


def _fields(run_inner, tmp_path, monkeypatch, name: str, *args: str) -> list[dict]:
    path = tmp_path / f"{name}.json"
    monkeypatch.setenv("OUTCOME_FIELDS", str(path))
    result, got = run_inner("inner_outcomes.py", *args)
    assert got == {
        "test_outcomes_of_a_failing_run": "PASSED",
        "test_last_rank_fails": "FAILED",
    }, result.stdout.str()
    if "--xla-backend=native" not in args:
        result.stdout.fnmatch_lines(SECTION)
    return json.loads(path.read_text())


def test_threads_and_processes_give_the_same_outcomes(run_inner, tmp_path, inner_environment):
    threads = _fields(
        run_inner, tmp_path, inner_environment, "threads", "--xla-devices=2", "--xla-processes=1"
    )
    processes = _fields(
        run_inner, tmp_path, inner_environment, "processes", "--xla-devices=2", "--xla-processes=2"
    )
    # XLA counters are per process: on the last rank of each process to finish.
    assert any([fields.pop("compiled") for fields in threads])
    assert all([fields.pop("compiled") for fields in processes])  # one core per process
    assert threads == processes
    passing, failing = threads
    assert passing == {
        "rank": 0,
        "size": 2,
        "result": {"rank": 0, "total": 21.0},
        "error": None,
        "raised": False,
        "released": False,
        "traceback": [],
        "emulator frames": False,
        "stdout": "out of rank 0\n",
        "stderr": "err of rank 0\n",
        "timed": True,
    }
    assert failing["error"] == "ValueError: rank 1 of 2 fails"
    assert failing["traceback"] == [
        "Traceback (most recent call last):",
        'raise ValueError(f"rank {rank} of {xr.world_size()} fails")',
        "ValueError: rank 1 of 2 fails",
    ]
    assert not failing["emulator frames"]
    assert (failing["stdout"], failing["stderr"]) == ("out of rank 1\n", "err of rank 1\n")


def test_native_gives_the_same_outcome(run_inner, tmp_path, inner_environment):
    inner_environment.setenv("CPU_NUM_DEVICES", "1")
    inner_environment.setenv("PJRT_DEVICE", "CPU")
    (native,) = _fields(run_inner, tmp_path, inner_environment, "native", "--xla-backend=native")
    assert native == {
        "rank": 0,
        "size": 1,
        "result": None,
        "error": "ValueError: rank 0 of 1 fails",
        "raised": True,
        "released": False,
        "traceback": [
            "Traceback (most recent call last):",
            'raise ValueError(f"rank {rank} of {xr.world_size()} fails")',
            "ValueError: rank 0 of 1 fails",
        ],
        "emulator frames": False,
        "stdout": "out of rank 0\n",
        "stderr": "err of rank 0\n",
        "timed": True,
        "compiled": True,
    }
