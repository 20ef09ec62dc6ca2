"""Property: for drawn programs of every file operation detection sees, over files and nested
directories, with collectives over drawn groups and send/recv pairs between drawn ranks, run
plainly or under a drawn schedule, detection reports exactly the pairs of accesses the
program's synchronisations leave unordered, in both modes (rank threads of this process, ranks
in worker processes). Under a schedule, each rank's scheduling points follow its program.

The expectation is computed here from the program, independently of xlasim's vector clocks:
a graph of each rank's steps in program order, an edge from every member's step before a
collective to every member's step after it, from a send to its receive; two conflicting
accesses race when neither reaches the other. Which accesses conflict is docs/races.md's
definition, written out again here.
"""

import contextlib
import os
import shutil
import tempfile

import pytest
import torch
import torch_xla
import torch_xla.core.xla_model as xm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xlasim.base.topology import Topology
from xlasim.races import RaceError, detecting, scheduled
from xlasim.ranks.world import World

RANKS = 4
FILES = ("a", "b", "d/a", "d/e/a")
DIRS = (".", "d", "d/e")

#: Each operation the program draws: what it is given (a file, a directory, two files) and the
#: accesses it makes, as (operation, path argument index) pairs; `link` names a new entry.
ON_FILE = {
    "write": ("write",),
    "read": ("read",),
    "save": ("write",),
    "load": ("read",),
    "exists": ("exists",),
    "stat": ("stat",),
    "remove": ("remove",),
    "truncate": ("truncate",),
    "chmod": ("chmod",),
    "utime": ("utime",),
    "link": ("stat", "link"),
    "symlink": ("symlink",),
}
ON_DIRECTORY = {
    "list": ("list",),
    "mkdir": ("mkdir",),
    "makedirs": ("makedirs(exist_ok=True)",),
    "rmtree": ("rmtree",),
    "rmdir": ("remove",),
    "isdir": ("exists",),
}
ON_TWO_FILES = {"rename": ("rename from", "rename to")}

CHANGES = {
    "write",
    "remove",
    "rename from",
    "rename to",
    "mkdir",
    "makedirs(exist_ok=True)",
    "rmtree",
    "truncate",
    "chmod",
    "utime",
    "link",
    "symlink",
}
IN_PLACE = {"truncate", "chmod", "utime"}
TREE = {"remove", "rename from", "rename to", "mkdir", "makedirs(exist_ok=True)", "rmtree"}
TREE |= {"symlink"}
ENSURE = "makedirs(exist_ok=True)"


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
accesses = st.one_of(
    st.tuples(st.just("access"), ranks, st.sampled_from(sorted(ON_FILE)), st.sampled_from(FILES)),
    st.tuples(
        st.just("access"), ranks, st.sampled_from(sorted(ON_DIRECTORY)), st.sampled_from(DIRS)
    ),
    st.tuples(
        st.just("access"),
        ranks,
        st.just("rename"),
        st.lists(st.sampled_from(FILES), min_size=2, max_size=2, unique=True).map(tuple),
    ),
)
#: A program: steps in one global order (each rank runs its own steps in that order, so the
#: program never deadlocks); accesses are drawn twice as often as synchronisations.
programs = st.lists(st.one_of(accesses, accesses, collectives, messages), max_size=12)
#: Plainly, or under a schedule.
seeds = st.one_of(st.none(), st.integers(1, 10**6))


def _new_entry(index):
    return f"entry{index}"


def run_program(rank, program, directory):
    """This rank's part of the program, in the program's order (failures of the operations
    themselves, a file not there yet, are the program's business)."""
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
            with contextlib.suppress(Exception):
                _operate(step[2], step[3], directory, index)


def _operate(op, argument, directory, index):
    if isinstance(argument, tuple):
        first, second = (os.path.join(directory, name) for name in argument)
    else:
        first = os.path.normpath(os.path.join(directory, argument))
    entry = os.path.join(directory, _new_entry(index))
    actions = {
        "write": lambda: open(first, "w").close(),
        "read": lambda: open(first).close(),
        "save": lambda: torch.save(torch.ones(1), first),
        "load": lambda: torch.load(first),
        "exists": lambda: os.path.exists(first),
        "isdir": lambda: os.path.isdir(first),
        "stat": lambda: os.path.getsize(first),
        "remove": lambda: os.remove(first),
        "truncate": lambda: os.truncate(first, 0),
        "chmod": lambda: os.chmod(first, 0o644),
        "utime": lambda: os.utime(first),
        "link": lambda: os.link(first, entry),
        "symlink": lambda: os.symlink(first, entry),
        "list": lambda: os.listdir(first),
        "mkdir": lambda: os.mkdir(first),
        "makedirs": lambda: os.makedirs(first, exist_ok=True),
        "rmtree": lambda: shutil.rmtree(first),
        "rmdir": lambda: os.rmdir(first),
        "rename": lambda: os.replace(first, second),
    }
    actions[op]()


def accesses_of(index, step, directory):
    """The (operation, path) accesses one access step makes."""
    op, argument = step[2], step[3]
    names = list(argument) if isinstance(argument, tuple) else [argument]
    made = {**ON_FILE, **ON_DIRECTORY, **ON_TWO_FILES}[op]
    if op in ("link", "symlink"):
        names = [argument, _new_entry(index)]
        if op == "symlink":
            names = names[1:]
    return [
        (kind, os.path.normpath(os.path.join(directory, name)))
        for kind, name in zip(made, names, strict=True)
    ]


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
    made = [
        (index, step[1], access)
        for index, step in enumerate(program)
        if step[0] == "access"
        for access in accesses_of(index, step, directory)
    ]
    found = set()
    for i, (first_index, first_rank, first) in enumerate(made):
        for second_index, second_rank, second in made[i + 1 :]:
            if first_rank == second_rank or not _conflict(first, second):
                continue
            if _ensured(first, second_rank, second_index, made) or _ensured(
                second, first_rank, first_index, made
            ):
                continue
            a, b = (first_index, first_rank), (second_index, second_rank)
            if b in reach[a] or a in reach[b]:
                continue
            found.add(frozenset({(first_rank, *first), (second_rank, *second)}))
    return found


def _reachable(node, edges):
    seen, stack = set(), [node]
    while stack:
        for successor in edges[stack.pop()]:
            if successor not in seen:
                seen.add(successor)
                stack.append(successor)
    return seen


def _below(path, directory):
    return path.startswith(directory + os.sep)


def _conflict(one, other):
    """docs/races.md: one path (or a listing and an entry of its directory, or a directory
    made, removed or moved and a path below it), and at least one a change; ensuring a
    directory twice is not."""
    (op1, path1), (op2, path2) = one, other
    if op1 not in CHANGES and op2 not in CHANGES:
        return False
    if op1 == op2 == ENSURE:
        return False
    if path1 == path2:
        return True
    for (lister, listed), (changer, changed) in ((one, other), (other, one)):
        if lister == "list" and changer not in IN_PLACE and os.path.dirname(changed) == listed:
            return True
    return (op1 in TREE and _below(path2, path1)) or (op2 in TREE and _below(path1, path2))


def _ensured(ensure, rank, index, made):
    """docs/races.md: a makedirs(exist_ok=True) is safe against an access of a rank that
    ensured that directory (or one below it) itself before."""
    if ensure[0] != ENSURE:
        return False
    return any(
        other_rank == rank
        and other_index < index
        and access[0] == ENSURE
        and (access[1] == ensure[1] or _below(access[1], ensure[1]))
        for other_index, other_rank, access in made
    )


def _tree(directory):
    """The files and directories the programs start from."""
    os.makedirs(os.path.join(directory, "d", "e"))
    for name in ("a", "d/a"):
        open(os.path.join(directory, name), "w").close()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=programs, seed=seeds)
def test_detection_reports_exactly_the_unordered_conflicts(some_world, program, seed):
    with (
        tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as directory,
        detecting(),
        scheduled(seed),
    ):
        directory = os.path.realpath(directory)
        _tree(directory)
        try:
            some_world.run(run_program, (program, directory))
            reported = set()
        except RaceError as error:
            reported = {
                frozenset({(a.rank, a.op, a.path) for a in (race.first, race.second)})
                for race in error.races
            }
    assert reported == expected_races(program, directory)
    if seed is not None:
        assert_points_follow_the_program(some_world.interleaving.decisions, program)


def assert_points_follow_the_program(decisions, program):
    """Each rank's decisions are its own steps, in its program's order: its start, then each
    access, collective (entered and left), send and receive of the program."""
    for rank in range(RANKS):
        taken = [
            d.point.split(" at ")[0]
            for d in decisions
            if d.rank == rank and d.point != "take its message"
        ]
        assert taken == ["start", *_points_of(rank, program)], (rank, decisions)


def _points_of(rank, program):
    for index, step in enumerate(program):
        if step[0] == "collective" and rank in step[1]:
            yield from ("enter all_reduce", "leave all_reduce")
        elif step[0] == "message" and rank in step[1:]:
            yield "send" if rank == step[1] else "receive"
        elif step[0] == "access" and rank == step[1]:
            yield from (op for op, _ in accesses_of(index, step, "/"))
