"""Rank outcomes: what `World.run_outcomes` returns and `RankFailedError` carries, the same on
rank threads and in worker processes, and how an outcome crosses a process boundary."""

import pickle
import sys

import pytest
import torch_xla.core.xla_model as xm
from _pytest.outcomes import Failed, Skipped

import xlasim
from xlasim import Collect, RankOutcome
from xlasim.base.topology import Topology
from xlasim.ranks.world import World


@pytest.fixture(scope="module")
def processes(world):
    """4 cores in 2 worker processes."""
    pair = World(Topology(4, processes=2), collective_timeout=3.0)
    yield pair
    pair.close()


def speak_then_fail_on_two(rank):
    print(f"out {rank}")
    print(f"err {rank}", file=sys.stderr)
    if rank == 2:
        raise KeyError(f"rank {rank}")
    xm.rendezvous("after")  # released when rank 2 fails
    return rank


class Unpicklable(Exception):
    def __reduce__(self):
        raise TypeError("no pickling")


def raise_unpicklable(rank):
    raise Unpicklable(f"rank {rank} raises a stubborn error")


def skip_on_every_rank(rank):
    pytest.skip(f"rank {rank} skips")


@pytest.mark.parametrize("where", ["threads", "processes"])
def test_every_rank_has_an_outcome(where, world, processes):
    on = world if where == "threads" else processes
    outcomes = on.run_outcomes(speak_then_fail_on_two, size=4, collect=Collect(output=True))
    assert [o.rank for o in outcomes] == [0, 1, 2, 3] and {o.size for o in outcomes} == {4}
    failed = outcomes[2]
    assert failed.raised and not failed.released and isinstance(failed.error, KeyError)
    assert failed.traceback.splitlines()[1].endswith(
        "in speak_then_fail_on_two"
    )  # user's frame first
    assert "xlasim" not in failed.traceback
    assert (failed.stdout, failed.stderr) == ("out 2\n", "err 2\n")
    assert failed.duration > 0
    for o in outcomes[:2] + outcomes[3:]:  # waiting in the rendezvous when rank 2 failed
        assert o.released and not o.raised and o.result is None
        assert (o.stdout, o.stderr) == (f"out {o.rank}\n", f"err {o.rank}\n")


@pytest.mark.parametrize("where", ["threads", "processes"])
def test_rank_failed_error_carries_the_outcomes(where, world, processes):
    on = world if where == "threads" else processes
    with pytest.raises(xlasim.RankFailedError) as failure:
        on.run(speak_then_fail_on_two, size=4)
    error = failure.value
    assert isinstance(error, KeyError)  # every failing rank raised KeyError
    assert [o.rank for o in error.outcomes] == [0, 1, 2, 3]
    assert error.ranks == [2] and list(error.failures) == [2]
    assert error.tracebacks[2] == error.outcomes[2].traceback
    assert "ranks 0-1, 3 were released" in str(error)
    copy = pickle.loads(pickle.dumps(error))
    assert [o.rank for o in copy.outcomes] == [0, 1, 2, 3] and copy.ranks == [2]


def raise_local(rank):
    class Local(Exception):
        pass

    raise Local(f"rank {rank} raises an error of a class no other process can find")


def test_exceptions_cross_processes(processes):
    (stubborn,) = processes.run_outcomes(raise_unpicklable, size=1)
    # Its own pickling fails, its class can be found: rebuilt from its class, args and state.
    assert type(stubborn.error) is Unpicklable
    assert stubborn.error.args == ("rank 0 raises a stubborn error",)
    assert "raise Unpicklable" in stubborn.traceback  # formatted where it was raised
    (local,) = processes.run_outcomes(raise_local, size=1)
    assert type(local.error) is xlasim.XlasimError  # a stand-in that names it
    assert "Local: rank 0 raises an error of a class" in str(local.error)
    assert "raise Local" in local.traceback
    skips = processes.run_outcomes(skip_on_every_rank, size=2)
    assert [type(o.error) for o in skips] == [Skipped, Skipped]  # claims builtins, rebuilt
    assert [o.error.msg for o in skips] == ["rank 0 skips", "rank 1 skips"]
    assert all(o.error.__traceback__ is None for o in skips)  # its frames stayed there


def test_portable_outcomes():
    failed = RankOutcome(0, 1, error=Failed("by pytest.fail"), traceback="text")
    copy = pickle.loads(pickle.dumps(failed))
    assert (type(copy.error), copy.error.msg, copy.traceback) == (Failed, "by pytest.fail", "text")
    lock = RankOutcome(1, 2, result=__import__("threading").Lock())
    sent = pickle.loads(pickle.dumps(lock.portable()))
    assert sent.result is None and sent.raised
    assert "rank 1 returned an object that cannot be pickled" in str(sent.error)
