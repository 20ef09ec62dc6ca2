"""`--xla-races`, `--xla-schedules=N` and `--xla-schedule=SEED` from pytest (docs/races.md)."""

import re

import pytest


def test_races_are_reported_only_when_asked_and_not_for_the_fixed_twin(run_inner):
    args = ("--xla-devices=4", "--xla-processes=1", "-k", "planted or fixed")
    result, got = run_inner("inner_races.py", *args)
    assert got == {"test_planted": "PASSED", "test_fixed": "PASSED"}, result.stdout.str()
    result, got = run_inner("inner_races.py", *args, "--xla-races")
    assert got == {"test_planted": "FAILED", "test_fixed": "PASSED"}, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*RaceError: 3 race(s) between ranks*",
            "*rank 0 (host 0): write*ready.marker",
            "*at test_inner.py:* in test_planted",
            "*rank 1 (host 0): exists*ready.marker",
            "*the same lines race between rank 0 and ranks 1-3 (3 pairs)",
        ]
    )


def _failing_seed(result):
    found = re.search(
        r"failed under schedule (\d+); replay exactly that schedule with --xla-schedule=(\d+)",
        result.stdout.str(),
    )
    assert found and found.group(1) == found.group(2), result.stdout.str()
    return found.group(1)


def test_a_schedule_that_fails_is_named_and_replays_its_interleaving(
    run_inner, inner_environment, pytester
):
    inner_environment.delenv("XLASIM_SCHEDULE_DIR", raising=False)  # the plugin's own choice
    args = ("--xla-devices=4", "-k", "order_sensitive and not drawn")
    result, got = run_inner("inner_races.py", *args, "--xla-schedules=20")
    assert got == {"test_order_sensitive": "FAILED"}, result.stdout.str()
    seed = _failing_seed(result)
    result.stdout.fnmatch_lines(
        [
            f"*{seed} schedule(s) took {seed} distinct interleaving(s)*",
            f"*its * decisions are recorded in *test_order_sensitive-schedule-{seed}.txt*",
        ]
    )
    recorded = pytester.path / ".xlasim" / "schedules"
    assert (recorded / f"test_inner.py_test_order_sensitive-schedule-{seed}.txt").exists()
    result, got = run_inner("inner_races.py", *args, f"--xla-schedule={seed}")
    assert got == {"test_order_sensitive": "FAILED"}, result.stdout.str()
    result.stdout.fnmatch_lines([f"schedule {seed}: it took the recorded interleaving*"])


def test_schedules_under_xdist_and_hypothesis(run_inner, inner_environment, pytester):
    """Each xdist worker explores its tests in its own world; a drawn example fails under a
    schedule, and the replay of that seed fails again with the recorded interleaving."""
    inner_environment.setenv("XLASIM_SCHEDULE_DIR", str(pytester.path / "schedules"))
    args = ("--xla-devices=4", "-n", "2", "-p", "xdist", "-k", "order_sensitive")
    result, got = run_inner("inner_races.py", *args, "--xla-schedules=10")
    assert got == {
        "test_order_sensitive": "FAILED",
        "test_drawn_order_sensitive": "FAILED",
    }, result.stdout.str()
    seed = _failing_seed(result)
    result.stdout.fnmatch_lines(["directory = *, writes = *"])  # the drawn example
    assert "could not import" not in result.stdout.str()  # imports take no scheduling point
    result, got = run_inner("inner_races.py", *args, f"--xla-schedule={seed}")
    assert set(got.values()) == {"FAILED"}, result.stdout.str()
    result.stdout.fnmatch_lines([f"schedule {seed}: it took the recorded interleaving*"])


def test_schedules_are_refused_on_a_pod_before_any_rank_starts(run_inner):
    args = ("--xla-topology=v4-16", "--xla-machines=2", "--xla-machine-rank=0")
    args += ("--xla-rendezvous=127.0.0.1:29763", "--xla-schedules=3", "-k", "fixed")
    result, got = run_inner("inner_races.py", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR and got == {}, result.stdout.str()
    result.stderr.fnmatch_lines(
        ["*xlasim: --xla-schedules is refused on a pod of several machines (--machines)*"]
    )
    assert "starting the ranks" not in result.stdout.str() + result.stderr.str()
