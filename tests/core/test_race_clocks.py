"""The pure parts of race detection: vector clocks from synchronisations, and which accesses
conflict and race (xlasim/races/clocks.py, accesses.py)."""

from xlasim.races.accesses import (
    ENSURE,
    EXISTS,
    LIST,
    MKDIR,
    READ,
    REMOVE,
    WRITE,
    Access,
    conflict,
    races,
)
from xlasim.races.clocks import GROUP, RECEIVE, SEND, Sync, clocks, happened_before


def group(members, sequence=0):
    return Sync(GROUP, (tuple(members), sequence), tuple(members))


def access(rank, op, path, position, order=0):
    return Access(rank, op, path, f"prog.py:{rank} in f", position, order)


def test_a_collective_orders_its_members_and_nobody_else():
    syncs = [[group([0, 1])], [group([0, 1])], []]
    after = clocks(syncs)
    assert after[0] == [(0, 0, 0), (1, 1, 0)] and after[1] == [(0, 0, 0), (1, 1, 0)]
    assert happened_before(0, after[0][0], after[1][1])  # rank 0 before, rank 1 after
    assert not happened_before(0, after[0][0], after[1][0])  # both before: unordered
    assert not happened_before(0, after[0][0], after[2][0])  # rank 2 was not in the group


def test_send_orders_the_sender_before_the_receiver_only():
    syncs = [[Sync(SEND, ("c", 0))], [Sync(RECEIVE, ("c", 0))]]
    after = clocks(syncs)
    assert happened_before(0, after[0][0], after[1][1])
    assert not happened_before(1, after[1][0], after[0][1])  # nothing flows back


def test_orders_are_transitive_through_chains_of_groups():
    syncs = [[group([0, 1])], [group([0, 1]), group([1, 2])], [group([1, 2])]]
    after = clocks(syncs)
    assert happened_before(0, after[0][0], after[2][1])


def test_a_collective_that_never_completed_ends_the_rank_there():
    after = clocks([[group([0, 1])], []])
    assert after == [[(0, 0)], [(0, 0)]]


def test_which_accesses_conflict():
    assert conflict(access(0, WRITE, "/d/f", 0), access(1, READ, "/d/f", 0))
    assert not conflict(access(0, READ, "/d/f", 0), access(1, EXISTS, "/d/f", 0))
    assert conflict(access(0, LIST, "/d", 0), access(1, WRITE, "/d/f", 0))
    assert not conflict(access(0, LIST, "/d", 0), access(1, WRITE, "/d/e/f", 0))
    assert conflict(access(0, MKDIR, "/d", 0), access(1, WRITE, "/d/e/f", 0))
    assert conflict(access(0, REMOVE, "/d/f", 0), access(1, READ, "/d/f", 0))
    assert not conflict(access(0, ENSURE, "/d", 0), access(1, ENSURE, "/d", 0))
    assert not conflict(access(0, WRITE, "/d/f", 0), access(1, READ, "/d/g", 0))


def test_a_collective_between_two_accesses_removes_the_race():
    write, read = access(0, WRITE, "/d/f", 0), access(1, READ, "/d/f", 0)
    unordered = clocks([[], []])
    assert races([write, read], unordered) != []
    barrier = clocks([[group([0, 1])], [group([0, 1])]])
    assert races([write, access(1, READ, "/d/f", 1)], barrier) == []
    # the read before the barrier still races with the write before it
    assert races([write, read], barrier) != []


def test_ensuring_a_directory_on_every_rank_is_safe_but_relying_on_anothers_is_not():
    unordered = clocks([[], []])
    own = [
        access(0, ENSURE, "/d", 0, order=0),
        access(1, ENSURE, "/d", 0, order=0),
        access(1, WRITE, "/d/f1", 0, order=1),
    ]
    assert races(own, unordered) == []
    relying = [access(0, ENSURE, "/d", 0, order=0), access(1, WRITE, "/d/f1", 0, order=0)]
    assert len(races(relying, unordered)) == 1
