"""Failure semantics: every way a TPU slice would hang or die becomes a prompt, named error."""

import re
import threading
import time

import pytest
import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_multiprocessing as xmp

import xlasim


def ones(n: int = 2) -> torch.Tensor:
    return torch.ones(n, device=torch_xla.device())


def test_rank_that_raises_releases_peers_within_a_second_and_is_named(world):
    def fn(rank):
        if rank == 5:
            time.sleep(0.2)  # peers are already blocked in the collective
            raise KeyError("rank five lost its key")
        xm.all_reduce("sum", ones())

    started = time.monotonic()
    with pytest.raises(xlasim.RankFailedError) as caught:
        world.run(fn)
    elapsed = time.monotonic() - started
    assert elapsed < 1.2 + 0.2
    error = caught.value
    assert error.ranks == [5]
    assert isinstance(error.__cause__, KeyError)
    assert "rank 5 of 8 raised KeyError" in str(error)
    assert "rank five lost its key" in error.tracebacks[5]
    assert "test_failures.py" in error.tracebacks[5]
    # Released because rank 5 raised, not later as peers of a rank that skipped the collective.
    released = [o for o in error.outcomes if o.released]
    assert [o.rank for o in released] == [0, 1, 2, 3, 4, 6, 7]
    assert all(isinstance(o.error.cause, KeyError) for o in released)


def test_several_failing_ranks_each_keep_their_traceback(world):
    def fn(rank):
        if rank in (1, 6):
            raise ValueError(f"bad input on {rank}")
        xm.all_reduce("sum", ones())

    with pytest.raises(xlasim.RankFailedError) as caught:
        world.run(fn)
    assert caught.value.ranks == [1, 6]
    assert "bad input on 1" in caught.value.tracebacks[1]
    assert "bad input on 6" in caught.value.tracebacks[6]


def fail_on_rank_two(index):
    if index == 2:
        raise RuntimeError("spawned rank failed")


def test_spawn_surfaces_rank_exceptions_to_the_caller(world):
    with pytest.raises(xlasim.RankFailedError, match="spawned rank failed") as caught:
        xmp.spawn(fail_on_rank_two)
    assert caught.value.ranks == [2]


def test_failure_is_also_the_ranks_own_exception_type(world):
    def fn(rank):
        if rank in (1, 3):
            raise KeyError(f"missing on {rank}")

    with pytest.raises(KeyError) as caught:
        world.run(fn)
    assert isinstance(caught.value, xlasim.RankFailedError)
    assert caught.value.ranks == [1, 3]

    def mixed(rank):
        raise (KeyError if rank else ValueError)(rank)

    with pytest.raises(xlasim.RankFailedError) as caught:
        world.run(mixed, size=2)
    assert not isinstance(caught.value, (KeyError, ValueError))


@pytest.mark.parametrize(
    "mismatch, expected",
    [
        (lambda r: xm.all_reduce("sum", ones(3 if r == 4 else 2)), "float32(3,)"),
        (lambda r: xm.all_reduce("max" if r == 4 else "sum", ones()), "reduce_type=max"),
        (lambda r: xm.all_gather(ones()) if r == 4 else xm.all_reduce("sum", ones()), "all_gather"),
        (
            lambda r: xm.all_reduce("sum", ones().to(torch.int32 if r == 4 else torch.float32)),
            "int32",
        ),
        (
            lambda r: xm.collective_broadcast([ones()], root_ordinal=1 if r == 4 else 0),
            "root_ordinal=1",
        ),
        (lambda r: xm.rendezvous("late" if r == 4 else "early"), "tag=late"),
    ],
    ids=["shape", "op-argument", "op", "dtype", "root", "rendezvous-tag"],
)
def test_mismatched_calls_fail_at_once_naming_each_rank_and_line(world, mismatch, expected):
    def fn(rank):
        mismatch(rank)

    started = time.monotonic()
    with pytest.raises(xlasim.CollectiveMismatchError) as caught:
        world.run(fn)
    assert time.monotonic() - started < 1.0
    message = str(caught.value)
    assert "rank 4:" in message and "ranks 0-3, 5-7:" in message
    assert expected in message
    assert "test_failures.py:" in message


def test_mismatched_groups_are_a_deadlock_reported_at_once(world):
    def fn(rank):
        groups = [[0, 1, 2, 3], [4, 5, 6, 7]] if rank == 0 else None
        xm.all_reduce("sum", ones(), groups=groups)

    started = time.monotonic()
    with pytest.raises(xlasim.CollectiveMismatchError) as caught:
        world.run(fn)
    assert time.monotonic() - started < 1.0
    assert "groups=((0, 1, 2, 3), (4, 5, 6, 7))" in str(caught.value)


def test_rank_that_skips_a_collective_is_reported_at_once(world):
    def fn(rank):
        if rank != 3:
            xm.all_reduce("sum", ones())

    with pytest.raises(xlasim.CollectiveMismatchError, match=r"missing ranks \[3\]"):
        world.run(fn)


def test_a_skipped_collective_report_accounts_for_every_rank(world):
    """Reported as soon as it is certain, while some ranks may still be on their way: every
    rank appears in the report, waiting, on its way or returned."""

    def fn(rank):
        if rank == 7:
            return
        if rank in (2, 5):
            time.sleep(0.5)  # still in user code when rank 7 returns
        xm.all_reduce("sum", ones())

    with pytest.raises(xlasim.CollectiveMismatchError) as caught:
        world.run(fn)
    accounted = ranks_named(str(caught.value).splitlines()[1:])
    assert sorted(accounted) == list(range(8))  # each rank once: waiting, on its way or returned
    assert accounted[7] == "returned from the function"
    assert accounted[2] == accounted[5] == "had not reached a collective yet"


def ranks_named(lines: list[str]) -> dict[int, str]:
    """`  ranks 0-2, 5 wait in ...` lines of a report, as {rank: what the line says}."""
    named = {}
    for line in lines:
        match = re.match(r"\s+ranks? ([\d, -]+?) (\D.*)", line)
        if match is None:
            continue
        for part in match.group(1).split(", "):
            first, _, last = part.partition("-")
            for rank in range(int(first), int(last or first) + 1):
                assert rank not in named, f"rank {rank} named twice"
                named[rank] = match.group(2)
    return named


def test_recv_without_sender_is_a_deadlock(world):
    def fn(rank):
        if rank == 0:
            xm.recv(torch.zeros(1, device=torch_xla.device()), channel_id=3)

    with pytest.raises(xlasim.DeadlockError, match="recv"):
        world.run(fn, size=2)


def test_rank_that_never_arrives_times_out_with_stacks_and_world_recovers(world, short_timeout):
    release = threading.Event()

    def fn(rank):
        if rank == 6:
            release.wait(30)  # stuck in user code, not in a collective
        xm.all_reduce("sum", ones())

    started = time.monotonic()
    with pytest.raises(xlasim.CollectiveTimeoutError) as caught:
        world.run(fn)
    elapsed = time.monotonic() - started
    release.set()
    assert short_timeout <= elapsed < short_timeout + 2.0
    report = str(caught.value)
    assert "rank 6 never arrived" in report
    assert "release.wait(30)" in report  # the stuck rank's own stack
    assert "ranks 0-5, 7 wait in all_reduce" in report
    assert world.run(lambda r: xm.all_reduce("sum", ones(1)).item()) == [8.0] * 8


def test_run_timeout_bounds_code_that_never_calls_a_collective(world):
    stop = threading.Event()

    def fn(rank):
        while not stop.is_set() and rank == 0:
            time.sleep(0.01)

    with pytest.raises(xlasim.CollectiveTimeoutError, match=r"did not finish within 0\.5 s"):
        world.run(fn, timeout=0.5)
    stop.set()
    assert world.run(lambda r: r) == list(range(8))


def test_misuse_has_clear_errors(world):
    with pytest.warns(xlasim.OutsideWorldWarning, match="took torch_xla's world-of-1 path"):
        xm.all_reduce("sum", torch.ones(2))
    with pytest.raises(xlasim.DeviceCountError, match="at least 1"):
        xlasim.emulate(devices=0)
    with pytest.raises(xlasim.DeviceCountError, match="do not fit this machine"):
        xlasim.emulate(devices=10**7)
    with pytest.raises(xlasim.DeviceCountError, match="emulates 8 cores"):
        world.run(lambda r: r, size=9)
    with pytest.raises(xlasim.RuntimeAlreadyStartedError, match="already started"):
        xlasim.emulate(devices=4)
    with pytest.raises(ValueError, match="nprocs"):
        xmp.spawn(lambda i: i, nprocs=4)


def test_spawn_from_inside_a_rank_is_refused(world):
    def fn(rank):
        xmp.spawn(lambda i: i)

    with pytest.raises(xlasim.RankFailedError, match="cannot be launched from inside rank"):
        world.run(fn, size=2)
