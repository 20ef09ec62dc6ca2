"""`--xla-races`, `--xla-schedules=N` and `--xla-schedule=SEED` from pytest (docs/races.md)."""

import re


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


def test_a_schedule_that_fails_is_named_and_replays(run_inner):
    args = ("--xla-devices=4", "-k", "order_sensitive")
    result, got = run_inner("inner_races.py", *args, "--xla-schedules=20")
    assert got == {"test_order_sensitive": "FAILED"}, result.stdout.str()
    found = re.search(
        r"failed under schedule (\d+); replay exactly that schedule with "
        r"--xla-schedule=(\d+)",
        result.stdout.str(),
    )
    assert found and found.group(1) == found.group(2), result.stdout.str()
    result, got = run_inner("inner_races.py", *args, f"--xla-schedule={found.group(1)}")
    assert got == {"test_order_sensitive": "FAILED"}, result.stdout.str()
