"""Mutants of race detection (the vector clocks, the detector's recording and comparisons) and of
the scheduler that owns the order under a schedule: xlasim/races/ and the rendezvous' turns."""

from __future__ import annotations

from mutant import mutant

CLOCKS = "xlasim/races/clocks.py"
ACCESSES = "xlasim/races/accesses.py"
WATCH = "xlasim/races/watch.py"
SCHEDULE = "xlasim/races/pct.py"
SCHEDULER = "xlasim/races/scheduler.py"
RENDEZVOUS = "xlasim/emulation/rendezvous.py"
CLOCKS_TESTS = ("tests/core/test_race_clocks.py",)
#: What the detector sees and how it compares: each operation, links, threads, forked workers.
BLIND_SPOT_TESTS = ("tests/core/test_race_blind_spots.py",)
SCHEDULER_TESTS = ("tests/core/test_race_scheduler.py",)

RACES_MUTANTS = (
    # ------------------------------------------------------------------ xlasim: race detection
    mutant(
        "race-collective-does-not-order",
        "a collective no longer orders its members' accesses: ordered accesses are reported",
        CLOCKS,
        "                        current[member] = list(joined)",
        "                        current[member][member] += 0",
        CLOCKS_TESTS,
    ),
    mutant(
        "race-listing-sees-in-place-changes",
        "a listing races with a chmod, truncate or utime of an entry (which it cannot see)",
        ACCESSES,
        "            and change.op not in IN_PLACE\n",
        "",
        BLIND_SPOT_TESTS,
    ),
    mutant(
        "race-forked-access-ordered",
        "a forked DataLoader worker's access counts as ordered by its rank's later collectives",
        ACCESSES,
        "    if earlier.detached:  # a forked process's access: nothing of its rank waits for it",
        "    if False:",
        BLIND_SPOT_TESTS,
    ),
    mutant(
        "race-links-not-resolved",
        "paths are compared as written: a file reached through a link is another file",
        WATCH,
        "        return os.path.realpath(path)",
        "        return os.path.abspath(path)",
        BLIND_SPOT_TESTS,
    ),
    mutant(
        "race-stat-unseen",
        "os.stat (getsize, getmtime, Path.stat) is not recorded",
        WATCH,
        "        os.stat = _recorded(STAT, os.stat)\n",
        "",
        BLIND_SPOT_TESTS,
    ),
    mutant(
        "race-thread-accesses-unseen",
        "what a thread a rank started does is not the rank's",
        WATCH,
        "        self.run = run_as_the_rank  # type: ignore[method-assign]",
        "        pass",
        BLIND_SPOT_TESTS,
    ),
    mutant(
        "race-forked-accesses-unseen",
        "what a process a rank forked (a DataLoader worker) does is not the rank's",
        WATCH,
        "        _local.watched = _Forked(watched) if watched.spill is not None else None",
        "        _local.watched = None",
        BLIND_SPOT_TESTS,
    ),
    mutant(
        "race-relative-path-read-at-fd-minus-one",
        "an audit event's -1 (no directory descriptor) is read as a descriptor: relative paths fail",
        WATCH,
        "        if dir_fd is not None and dir_fd >= 0 and not os.path.isabs(path):",
        "        if dir_fd is not None and not os.path.isabs(path):",
        BLIND_SPOT_TESTS,
    ),
    mutant(
        "race-unrecorded-swallowed",
        "an access detection could not record is dropped: the launch passes blind",
        WATCH,
        '            watched.blind(f"{op} {path!r} at {call_location(sys._getframe(1))}", error)',
        "            pass",
        BLIND_SPOT_TESTS,
    ),
    # ------------------------------------------------------------------ xlasim: the scheduler
    mutant(
        "scheduler-ignores-priorities",
        "every schedule runs the lowest enabled rank first: one order, whatever the seed",
        SCHEDULE,
        "        chosen = max(enabled, key=self.priority.__getitem__)",
        "        chosen = min(enabled)",
        SCHEDULER_TESTS,
    ),
    mutant(
        "scheduler-no-change-points",
        "PCT without change points: orders that need another winner later are unreachable",
        SCHEDULE,
        "        if last is not None and step in self._changes:",
        "        if False:",
        SCHEDULER_TESTS,
    ),
    mutant(
        "scheduler-pollers-keep-the-turn",
        "a rank polling a file keeps the turn: the rank it waits for never runs",
        SCHEDULE,
        "            if self._streak[points[last]] >= SPIN_REPEATS:",
        "            if False:",
        SCHEDULER_TESTS,
    ),
    mutant(
        "scheduler-decides-while-ranks-run",
        "a decision is taken while ranks still run: two ranks run at once, replays differ",
        SCHEDULER,
        "        if self.stopped or RUNNING in self.states.values():",
        "        if self.stopped:",
        SCHEDULER_TESTS,
    ),
    mutant(
        "scheduler-collective-exit-not-a-point",
        "ranks leaving a collective run on together instead of waiting for their turn",
        RENDEZVOUS,
        "        self._await_turn(rank)  # the collective's exit: every member was parked there",
        "        pass",
        SCHEDULER_TESTS,
    ),
    mutant(
        "scheduler-waits-bounded-from-their-start",
        "a wait under a schedule times out though the ranks it waits for are taking turns",
        RENDEZVOUS,
        "                    since = max(since, self.scheduler.progress)",
        "                    pass",
        SCHEDULER_TESTS,
    ),
)
