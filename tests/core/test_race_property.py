"""Property: for drawn programs of collectives, send/recv pairs and file operations over drawn
ranks, detection reports exactly the pairs of accesses the program's synchronisations leave
unordered, in both modes (rank threads of this process, ranks in worker processes).

The expectation is computed here from the program, independently of xlasim's vector clocks:
a graph of each rank's steps in program order, an edge from every member's step before a
collective to every member's step after it, from a send to its receive; two conflicting
accesses race when neither reaches the other.
"""

import os
import tempfile

import pytest
import torch
import torch_xla
import torch_xla.core.xla_model as xm
from hypothesis import given, settings
from hypothesis import strategies as st

from xlasim.base.topology import Topology
from xlasim.races import RaceError, detecting
from xlasim.ranks.world import World

RANKS = 4
FILES = ("a", "b")
OPS = ("write", "exists", "list")


@pytest.fixture(scope="module", params=["threads", "processes"])
def some_world(request, world):
    """4 ranks: threads of this process, or 2 worker processes of 2 ranks each."""
    processes = 1 if request.param == "threads" else 2
    built = World(Topology(RANKS, processes=processes), collective_timeout=30.0)
    yield built
    built.close()


ranks = st.integers(0, RANKS - 1)
collectives = st.tuples(
    st.just("collective"), st.lists(ranks, min_size=2, max_size=RANKS, unique=True).map(sorted)
)
messages = st.lists(ranks, min_size=2, max_size=2, unique=True).map(lambda p: ("message", *p))
accesses = st.tuples(st.just("access"), ranks, st.sampled_from(OPS), st.sampled_from(FILES))
#: A program: steps in one global order (each rank runs its own steps in that order, so the
#: program never deadlocks); accesses are drawn twice as often as synchronisations.
programs = st.lists(st.one_of(accesses, accesses, collectives, messages), max_size=10)


def run_program(rank, program, directory):
    """This rank's part of the program, in the program's order."""
    for index, step in enumerate(program):
        if step[0] == "collective" and rank in step[1]:
            value = torch.ones(1, device=torch_xla.device())
            xm.all_reduce(xm.REDUCE_SUM, value, groups=[list(step[1])])
            torch_xla.sync()
        elif step[0] == "message" and rank == step[1]:
            xm.send(torch.ones(1, device=torch_xla.device()), channel_id=index)
        elif step[0] == "message" and rank == step[2]:
            xm.recv(torch.zeros(1, device=torch_xla.device()), channel_id=index)
        elif step[0] == "access" and rank == step[1]:
            path = os.path.join(directory, step[3])
            if step[2] == "write":
                with open(path, "w") as out:
                    out.write(str(rank))
            elif step[2] == "exists":
                os.path.exists(path)
            else:
                os.listdir(directory)


def expected_races(program, directory):
    """(rank, op, path) pairs, each pair a frozenset, of accesses left unordered."""
    last = {}  # rank -> its latest node
    edges = {}  # node -> successors
    nodes = []

    def add(rank, node, extra_predecessors=()):
        edges.setdefault(node, set())
        for previous in [last.get(rank), *extra_predecessors]:
            if previous is not None:
                edges[previous].add(node)
        last[rank] = node
        nodes.append(node)

    for index, step in enumerate(program):
        if step[0] == "collective":
            before = [last.get(m) for m in step[1]]
            for member in step[1]:
                add(member, (index, member), before)
        elif step[0] == "message":
            add(step[1], (index, step[1]))
            add(step[2], (index, step[2]), [(index, step[1])])
        else:
            add(step[1], (index, step[1]))
    reach = {node: _reachable(node, edges) for node in nodes}
    accesses = [(index, step) for index, step in enumerate(program) if step[0] == "access"]
    found = set()
    for i, (first_index, first) in enumerate(accesses):
        for second_index, second in accesses[i + 1 :]:
            if first[1] == second[1] or not _conflict(first, second):
                continue
            a, b = (first_index, first[1]), (second_index, second[1])
            if b in reach[a] or a in reach[b]:
                continue
            found.add(frozenset({_described(first, directory), _described(second, directory)}))
    return found


def _reachable(node, edges):
    seen, stack = set(), [node]
    while stack:
        for successor in edges[stack.pop()]:
            if successor not in seen:
                seen.add(successor)
                stack.append(successor)
    return seen


def _conflict(one, other):
    ops = {one[2], other[2]}
    if "write" not in ops:
        return False
    if ops == {"write", "list"}:
        return True  # the listing sees the file appear (or be rewritten in place)
    return one[3] == other[3]


def _described(step, directory):
    op = {"write": "write", "exists": "exists", "list": "list"}[step[2]]
    path = directory if step[2] == "list" else os.path.join(directory, step[3])
    return (step[1], op, path)


@settings(max_examples=12, deadline=None)
@given(program=programs)
def test_detection_reports_exactly_the_unordered_conflicts(some_world, program):
    with tempfile.TemporaryDirectory() as directory, detecting():
        directory = os.path.realpath(directory)
        try:
            some_world.run(run_program, (program, directory))
            reported = set()
        except RaceError as error:
            reported = {
                frozenset({(a.rank, a.op, a.path) for a in (race.first, race.second)})
                for race in error.races
            }
    assert reported == expected_races(program, directory)
