"""What coverage and the plugin cost (issue 33), measured from outside as users run them.

- cost of coverage: a suite subset under `pytest --cov=tests --cov-branch` (what a user
  measures: their own code) against the same subset without it, in each mode, back to back;
  the target: what coverage costs the isolated mode (its workers measure themselves and write
  data files) is no more than what it costs the threads mode, as a ratio of ratios;
- per-test overhead of the plugin with no tool on (`pytest_runs.dispatch`), for this checkout
  and, when given, another one (the "before" of a change: a checkout of main), so a change
  that costs every test shows.

Every run must pass; the subset's failures make the record a note instead.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest_runs
from common import MODES
from processes import run_bounded

SUBSET = (
    "tests/strategy/test_strategy_collectives.py",
    "tests/strategy/test_strategy_checkpoint.py",
)
#: What a user measures: their own code, which the ranks run (here the suite's test files), not
#: the emulator's (`--cov=xlasim` would also trace the isolated mode's own machinery in every
#: worker: 1.3-1.6x against threads' 1.1-1.2x, measured 2026-11-28).
COVERAGE = ("--cov=tests", "--cov-branch", "--cov-report=")


def _suite_seconds(mode: str, *options: str) -> float:
    """Wall time of the subset in `mode`; coverage's data goes to a directory of its own, not
    into the repository."""
    command = pytest_runs.pytest_command(mode, *options, *SUBSET)
    with tempfile.TemporaryDirectory(prefix="xlasim-bench-cov-") as data:
        env = {**os.environ, "COVERAGE_FILE": str(Path(data) / ".coverage")}
        finished = run_bounded(command, pytest_runs.SUITE_TIMEOUT_S, cwd=pytest_runs.REPO, env=env)
    summary = pytest_runs.summary_line(finished)
    if not finished.ok or "failed" in summary or "error" in summary:
        raise RuntimeError(f"{' '.join(command[3:])}: {summary}\n{finished.stdout[-2000:]}")
    return finished.seconds


def cost() -> dict:
    """The subset with and without coverage in each mode, and the isolated mode's cost of
    coverage over the threads mode's."""
    seconds = {(mode, on): _suite_seconds(mode, *(COVERAGE if on else ())) for mode in MODES
               for on in (False, True)}  # fmt: skip
    cov_over_plain = {mode: seconds[mode, True] / seconds[mode, False] for mode in MODES}
    return {
        "op": "coverage_cost",
        "mode": "isolated",
        "devices": pytest_runs.DEVICES,
        "xlasim_s": seconds["isolated", True],
        "seconds": {f"{mode} {'cov' if on else 'plain'}": s for (mode, on), s in seconds.items()},
        "cov_over_plain": cov_over_plain,
        "isolated_cost_over_threads": cov_over_plain["isolated"] / cov_over_plain["threads"],
        "subset": " ".join(SUBSET),
        "load": os.getloadavg(),
    }


def dispatch(checkout: Path, rounds: int) -> list[dict]:
    """The plugin's per-test overhead in each mode, with `checkout`'s xlasim imported."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    return [
        {**pytest_runs.dispatch(rounds, mode, env), "op": "coverage_dispatch",
         "checkout": str(checkout), "load": os.getloadavg()}
        for mode in MODES
    ]  # fmt: skip


def cost_line(r: dict) -> str:
    shown = ", ".join(f"{k} {v:.1f} s" for k, v in r["seconds"].items())
    ratios = ", ".join(f"{mode} {v:.2f}x" for mode, v in r["cov_over_plain"].items())
    load = "{:.1f} {:.1f} {:.1f}".format(*r["load"])
    return (
        f"--cov on {r['subset']}: {shown}; with / without: {ratios}; isolated's cost over "
        f"threads' {r['isolated_cost_over_threads']:.2f}x (load {load})"
    )


def dispatch_line(r: dict) -> str:
    load = "{:.1f} {:.1f} {:.1f}".format(*r["load"])
    return (
        f"per-test overhead, no tool on, xlasim of {r['checkout']}: "
        f"{r['xlasim_s'] * 1e3:.2f} ms (load {load})"
    )
