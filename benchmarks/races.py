"""What race detection and schedules cost (issue 27), measured from outside as users run them.

- detection: `pytest --xla-devices=8 tests/properties` with and without `--xla-races`, back to
  back, wall time of each (the target: on / off at most 1.3x);
- exploration: one 8-rank test that saves and loads a checkpoint, the call phase of the test as
  pytest's `--durations` reports it, once plain and once under `--xla-schedules=1` (the target:
  scheduled / plain at most 1.5x), best of `rounds` alternated runs; and the plain run again
  pinned to one CPU (`taskset -c 0`): under a schedule ranks run one at a time, so the work the
  plain run overlaps on the machine's cores cannot overlap, and that run is the floor a
  schedule can reach (on 2 cores, scheduled / plain cannot go below one-CPU / plain).

Both in the default mode (isolated: one worker process per core). Every run must pass.
"""

from __future__ import annotations

import os
import re
import tempfile

from processes import Finished, run_bounded
from pytest_runs import REPO, SUITE_TIMEOUT_S, pytest_command, summary_line

DETECTION_PATHS = ("tests/properties",)
EXPLORED_TEST = (
    "tests/strategy/test_strategy_checkpoint.py::"
    "test_save_writes_once_on_global_rank_zero_and_every_rank_can_load"
)
MODE = "isolated"
EXPLORATION_TIMEOUT_S = 600.0


def _passed(finished: Finished, what: str) -> Finished:
    if not finished.ok or " passed" not in finished.stdout or "failed" in summary_line(finished):
        # pytest says what failed on stdout, the child's failure says how it ended
        raise RuntimeError(f"{what}: {finished.failure()}\n{finished.stdout[-2000:]}")
    return finished


def detection() -> dict:
    """tests/properties with detection off, then on."""
    runs = {}
    for label, options in (("off", ()), ("on", ("--xla-races",))):
        command = pytest_command(MODE, *options, *DETECTION_PATHS)
        runs[label] = _passed(
            run_bounded(command, SUITE_TIMEOUT_S, cwd=REPO), f"{' '.join(command[3:])}"
        )
    return {
        "op": "races_detection",
        "mode": MODE,
        "devices": 8,
        "xlasim_s": runs["on"].seconds,
        "off_s": runs["off"].seconds,
        "on_over_off": runs["on"].seconds / runs["off"].seconds,
        "summary": summary_line(runs["on"]),
        "load": os.getloadavg(),
    }


def _call_seconds(options: tuple[str, ...], schedules: str, pinned: bool = False) -> float:
    command = pytest_command(MODE, "--durations=0", "-vv", *options, EXPLORED_TEST)
    if pinned:  # every process of the session on CPU 0 (workers inherit the affinity)
        command = ["taskset", "-c", "0", *command]
    # the scheduled run's interleavings go to a directory of the benchmark's (docs/races.md)
    env = {**os.environ, "XLASIM_SCHEDULE_DIR": schedules}
    finished = _passed(
        run_bounded(command, EXPLORATION_TIMEOUT_S, cwd=REPO, env=env), EXPLORED_TEST
    )
    found = re.search(r"^([\d.]+)s call\s+" + re.escape(EXPLORED_TEST), finished.stdout, re.M)
    if found is None:
        raise RuntimeError(f"no call duration for {EXPLORED_TEST} in: {finished.stdout[-2000:]}")
    return float(found.group(1))


def exploration(rounds: int) -> dict:
    """One schedule of an 8-rank test against one plain run, best of `rounds` each."""
    plain, scheduled, one_cpu = [], [], []
    with tempfile.TemporaryDirectory() as schedules:
        for _ in range(rounds):
            plain.append(_call_seconds((), schedules))
            scheduled.append(_call_seconds(("--xla-schedules=1",), schedules))
            one_cpu.append(_call_seconds((), schedules, pinned=True))
    return {
        "op": "races_schedule",
        "mode": MODE,
        "devices": 8,
        "xlasim_s": min(scheduled),
        "plain_s": min(plain),
        "scheduled_over_plain": min(scheduled) / min(plain),
        "one_cpu_s": min(one_cpu),
        "scheduled_over_one_cpu": min(scheduled) / min(one_cpu),
        "test": EXPLORED_TEST,
        "load": os.getloadavg(),
    }


def _load(r: dict) -> str:
    """The load average as the record ended (records made before it was kept have none)."""
    return ", load {:.1f} {:.1f} {:.1f}".format(*r["load"]) if "load" in r else ""


def detection_line(r: dict) -> str:
    return (
        f"race detection, pytest tests/properties: {r['xlasim_s']:.1f} s with --xla-races, "
        f"{r['off_s']:.1f} s without ({r['on_over_off']:.2f}x{_load(r)}; {r['summary']})"
    )


def schedule_line(r: dict) -> str:
    load = _load(r)
    floor = (
        f"; plain on one CPU {r['one_cpu_s']:.2f} s, the floor: schedule / that "
        f"{r['scheduled_over_one_cpu']:.2f}x"
        if "one_cpu_s" in r
        else ""
    )
    return (
        f"one schedule of {r['test'].split('::')[-1]} (8 ranks): call {r['xlasim_s']:.2f} s, "
        f"plain {r['plain_s']:.2f} s ({r['scheduled_over_plain']:.2f}x{load}){floor}"
    )
