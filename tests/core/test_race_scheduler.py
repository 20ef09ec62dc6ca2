"""The scheduler that owns the order (docs/races.md, "Schedules"): PCT's priorities and change
points, one rank at a time between scheduling points, the order of file operations is the
order of the decisions, a seed gives the same interleaving again (also beside CPU hogs), every
topology, a turn held past the bound fails by name, waits that take turns do not time out."""

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import torch_xla.core.xla_model as xm

from fixtures import race_catalogue
from xlasim.base.errors import ScheduleStalledError
from xlasim.base.topology import Topology
from xlasim.races import scheduled
from xlasim.races.launch_requests import named
from xlasim.races.pct import MAX_STEPS, SPIN_REPEATS, Pct, change_points
from xlasim.races.scheduler import BLOCKED, DONE, PARKED, RUNNING, Scheduler
from xlasim.ranks.world import World

# ---------------------------------------------------------------------------- the policy alone


def test_a_seed_draws_one_priority_per_rank_and_the_highest_enabled_runs():
    pct = Pct(7, range(4), depth=1)
    assert sorted(pct.priority.values()) == [1, 2, 3, 4]
    order = sorted(range(4), key=pct.priority.__getitem__, reverse=True)
    points = {r: ("p", "") for r in range(4)}
    assert pct.choose(1, [0, 1, 2, 3], points) == order[0]
    assert pct.choose(2, order[1:], points) == order[1]
    assert Pct(7, range(4), depth=1).priority == pct.priority
    assert len({tuple(sorted(Pct(s, range(4)).priority.items())) for s in range(1, 30)}) > 10


def test_at_a_change_point_the_rank_that_ran_last_drops_below_every_rank():
    seed = next(s for s in range(1, 10**4) if change_points(s, 2)[0] == 3)
    pct = Pct(seed, range(3), depth=2)
    top = max(range(3), key=pct.priority.__getitem__)
    points = {r: ("p", "") for r in range(3)}
    assert [pct.choose(step, [0, 1, 2], points) for step in (1, 2)] == [top, top]
    assert pct.choose(3, [0, 1, 2], points) != top  # decision 3 is the change point
    assert pct.priority[top] == 1 < min(p for r, p in pct.priority.items() if r != top)


def test_change_points_are_drawn_log_uniformly_up_to_the_bound():
    drawn = [change_points(seed, 2)[0] for seed in range(2000)]
    assert all(1 <= step <= MAX_STEPS for step in drawn)
    # P(s <= 100) = ln(101) / ln(MAX_STEPS + 1) ~ 0.33: short launches get their share
    assert 0.25 < sum(step <= 100 for step in drawn) / len(drawn) < 0.42


def test_a_rank_polling_one_point_yields_to_the_others():
    pct = Pct(1, range(2), depth=1)
    poller = max(range(2), key=pct.priority.__getitem__)
    points = {poller: ("exists at poll.py:3", "/x"), 1 - poller: ("write at w.py:1", "/x")}
    chosen = [pct.choose(step, [0, 1], points) for step in range(1, SPIN_REPEATS + 2)]
    assert chosen[:SPIN_REPEATS] == [poller] * SPIN_REPEATS
    assert chosen[SPIN_REPEATS] == 1 - poller


def test_the_scheduler_decides_only_when_no_rank_runs():
    woken = []
    scheduler = Scheduler(3, range(3), lambda: woken.append(1), depth=1)
    scheduler.park(0, "start")
    scheduler.park(1, "start")
    assert scheduler.decisions == []  # rank 2 has not reached its first point
    scheduler.park(2, "start")
    (first,) = scheduler.decisions
    assert scheduler.states[first.rank] == RUNNING and woken
    scheduler.block(first.rank)
    assert len(scheduler.decisions) == 2 and scheduler.states[first.rank] == BLOCKED
    second = scheduler.decisions[-1].rank
    scheduler.finish(second)
    third = scheduler.decisions[-1].rank
    assert scheduler.states == {first.rank: BLOCKED, second: DONE, third: RUNNING}
    scheduler.enable({first.rank: "leave x", third: "leave x"})
    assert scheduler.states[scheduler.decisions[-1].rank] == RUNNING
    assert PARKED in scheduler.states.values()


# ---------------------------------------------------------------------------- on worlds


TOPOLOGIES = {
    "threads": Topology(8, processes=1),
    "processes": Topology(8),
    "2 ranks per process": Topology(8, processes=4),
    "2 hosts": Topology(8, processes=4, hosts=2),
}


@pytest.fixture(scope="module", params=list(TOPOLOGIES))
def any_world(request, world):
    if request.param == "threads":
        yield world
        return
    built = World(TOPOLOGIES[request.param], collective_timeout=30.0)
    yield built
    built.close()


def appends(rank, path):
    """Every rank appends to one file three times, a rendezvous after the second."""
    for step in range(3):
        with open(path, "a") as out:
            out.write(f"{rank} {step}\n")
        if step == 1:
            xm.rendezvous("middle")


def _appended(world, seed, path):
    with scheduled(seed), named("appends"):
        world.run(appends, (path,))
    with open(path) as lines:
        return [int(line.split()[0]) for line in lines]


def test_file_operations_happen_in_the_order_of_the_decisions(any_world, tmp_path):
    for seed in (1, 2, 3):
        path = str(tmp_path / f"log{seed}")
        order = _appended(any_world, seed, path)
        writes = [d.rank for d in any_world.interleaving.decisions if d.point.startswith("write")]
        assert order == writes and sorted(order) == sorted(list(range(8)) * 3)
        # the rendezvous orders them: every rank's first two writes come before any third
        places = {r: [i for i, written in enumerate(order) if written == r] for r in range(8)}
        assert max(p[1] for p in places.values()) < min(p[2] for p in places.values())


def test_a_seed_replays_its_interleaving_and_another_seed_takes_another(any_world, tmp_path):
    first = _appended(any_world, 5, str(tmp_path / "first"))
    taken = any_world.interleaving
    again = _appended(any_world, 5, str(tmp_path / "again"))
    assert again == first and any_world.interleaving.keys == taken.keys
    assert any_world.interleaving.matches_recording() is True  # compared with the file
    assert _appended(any_world, 6, str(tmp_path / "other")) != first


def test_a_replay_takes_the_recorded_interleaving_beside_cpu_hogs(world, tmp_path):
    first = _appended(world, 9, str(tmp_path / "quiet"))
    recorded = world.interleaving.keys
    with race_catalogue.cpu_hogs():
        for attempt in range(5):
            assert _appended(world, 9, str(tmp_path / f"loaded{attempt}")) == first
            assert world.interleaving.keys == recorded
            assert world.interleaving.matches_recording() is True


inside = []


def one_at_a_time(rank, path):
    """Between its points a rank works without any (after a file operation, after leaving a
    collective), and says when it starts and stops."""
    for _ in range(3):
        os.path.exists(path)  # a scheduling point
        _work(rank)
        xm.rendezvous("step")  # entered and left: two more
        _work(rank)


def _work(rank):
    inside.append(("in", rank))
    until = time.perf_counter() + 0.01  # longer than the interpreter's switch interval
    while time.perf_counter() < until:
        pass
    inside.append(("out", rank))


def test_ranks_run_one_at_a_time_between_points(world, tmp_path):
    inside.clear()
    with scheduled(4):
        world.run(one_at_a_time, (str(tmp_path / "x"),))
    pairs = list(zip(inside[::2], inside[1::2], strict=True))
    assert all(a[0] == "in" and b[0] == "out" and a[1] == b[1] for a, b in pairs), inside


def holds_its_turn(rank, seconds, meet):
    if rank == 3:
        threading.Event().wait(seconds)  # waits on nothing any rank will do, holding its turn
    os.path.exists("/nonexistent")
    if meet:
        xm.rendezvous("after")


@pytest.mark.parametrize("others", ["parked", "in a rendezvous"])
def test_a_rank_that_holds_its_turn_past_the_bound_fails_the_launch_by_name(others):
    """Rank 3 runs first (parked: the others wait for their turn) or last (the others wait in
    a rendezvous): either way the launch fails within the bound, naming it."""
    first = others == "parked"
    seed = next(
        s
        for s in range(1, 1000)
        if (max(range(4), key=Pct(s, range(4)).priority.__getitem__) == 3) == first
    )
    stalling = World(Topology(4, processes=1), collective_timeout=1.0)
    try:
        started = time.monotonic()
        with scheduled(seed), pytest.raises(ScheduleStalledError) as raised:
            stalling.run(holds_its_turn, (2.5, not first))
        assert time.monotonic() - started < 3.5
    finally:
        stalling.close()
    text = str(raised.value)
    assert f"under schedule {seed}, rank 3 had the turn for more than 1 s" in text
    assert "reached no scheduling point" in text and "in holds_its_turn" in text


def works_then_meets(rank, seconds):
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass
    xm.rendezvous("after the work")


def test_waits_of_ranks_that_take_turns_are_bounded_from_the_last_decision(tmp_path):
    # 8 ranks x 0.3 s of work, one at a time: 2.4 s at the rendezvous for the first rank in,
    # more than the collective bound of 1 s, which still holds between two decisions
    taking_turns = World(Topology(8, processes=1), collective_timeout=1.0)
    try:
        with scheduled(1):
            taking_turns.run(works_then_meets, (0.3,))
    finally:
        taking_turns.close()


def sends_along_a_ring(rank, path):
    import torch
    import torch_xla

    device = torch_xla.device()
    if rank > 0:
        xm.recv(torch.zeros(1, device=device), channel_id=rank)
    with open(path, "a") as out:
        out.write(f"{rank}\n")
    if rank < 7:
        xm.send(torch.ones(1, device=device), channel_id=rank + 1)


def test_a_receive_waits_for_its_send_under_a_schedule(any_world, tmp_path):
    for seed in (1, 2):
        path = str(tmp_path / f"ring{seed}")
        with scheduled(seed):
            any_world.run(sends_along_a_ring, (path,))
        with open(path) as lines:
            assert [int(line) for line in lines] == list(range(8))


def test_a_failing_launch_names_the_file_of_its_interleaving(world, tmp_path, monkeypatch):
    # A directory of its own: the session's already holds this name's recording when the
    # catalogue's tests ran first, and the note then says the launch took it.
    monkeypatch.setenv("XLASIM_SCHEDULE_DIR", str(tmp_path))
    with (
        tempfile.TemporaryDirectory() as directory,
        scheduled(1),
        named("read_before_write"),
        pytest.raises(FileNotFoundError) as raised,
    ):
        world.run(race_catalogue.read_before_write, (directory, False))
    text = str(raised.value)  # the rank's section: its traceback, with the note
    assert "xlasim: schedule 1: its " in text and "read_before_write-schedule-1.txt" in text
    path = world.interleaving.file
    decisions = len(world.interleaving.decisions)
    assert path.read_text().splitlines()[1] == f"launch 1: {decisions} decisions"


CATALOGUE = Path(__file__).resolve().parents[2] / "fixtures" / "race_catalogue.py"


def test_xlasim_run_explores_counts_and_replays_its_recorded_interleaving(tmp_path):
    """`xlasim run --schedules N` runs each seed in a fresh process until one fails, says how
    many distinct interleavings they took; `--schedule S` replays and compares."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("XLASIM_")}
    env["XLASIM_SCHEDULE_DIR"] = str(tmp_path / "schedules")
    shared = tmp_path / "shared"
    shared.mkdir()

    def xlasim_run(*options):
        return subprocess.run(
            [
                *(sys.executable, "-m", "xlasim", "run", "--devices", "4", "--processes", "1"),
                *(*options, str(CATALOGUE), "read_before_write", str(shared)),
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    explored = xlasim_run("--schedules", "5")
    assert explored.returncode != 0
    failed = re.search(r"xlasim: schedule (\d) of 5 failed", explored.stderr)
    assert failed, explored.stderr[-3000:]
    seed = int(failed.group(1))
    assert f"xlasim: {seed} schedule(s) took {seed} distinct interleaving(s)" in explored.stderr
    recorded = tmp_path / "schedules" / f"race_catalogue-schedule-{seed}.txt"
    assert recorded.exists()
    for leftover in shared.iterdir():
        leftover.unlink()
    replayed = xlasim_run("--schedule", str(seed))
    assert replayed.returncode != 0 and "FileNotFoundError" in replayed.stderr
    assert f"xlasim: schedule {seed}: it took the recorded interleaving of {recorded}" in (
        replayed.stderr
    ), replayed.stderr[-3000:]
