"""A detector that says when it is blind (docs/races.md, "What a rank does to files"): an access
it cannot record fails the launch naming rank, operation and cause; stat, truncate, chmod,
utime, link and symlink are seen; paths are compared with their links resolved; accesses of
threads a rank starts and of processes it forks (DataLoader workers) are the rank's."""

import contextlib
import os
import threading

import pytest
import torch
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr

from xlasim.base.topology import Topology
from xlasim.races import RaceError, detecting
from xlasim.races import watch as watch_module
from xlasim.races.race_report import RaceRecordingError
from xlasim.ranks.world import World


@pytest.fixture(scope="module")
def two_processes(world):
    built = World(Topology(2, processes=2), collective_timeout=30.0)
    yield built
    built.close()


@pytest.fixture(params=["threads", "processes"])
def either(request, world, two_processes):
    return world if request.param == "threads" else two_processes


def _races(world, fn, *args, size=2):
    """The (rank, op, path) pairs of the races a detecting launch reports."""
    with detecting():
        try:
            world.run(fn, args, size=size)
        except RaceError as error:
            return {
                frozenset((a.rank, a.op, a.path) for a in (race.first, race.second))
                for race in error.races
            }
    return set()


OPERATIONS = {
    "getsize": (lambda p: os.path.getsize(p), "stat"),
    "stat": (lambda p: os.stat(p), "stat"),
    "truncate": (lambda p: os.truncate(p, 0), "truncate"),
    "chmod": (lambda p: os.chmod(p, 0o600), "chmod"),
    "utime": (lambda p: os.utime(p), "utime"),
    "link": (lambda p: os.link(p, p + ".hard"), "stat"),
    "read": (lambda p: open(p).close(), "read"),
}


def one_operates_the_other_writes(rank, path, operation):
    if rank == 0:
        with open(path, "w") as out:
            out.write("x")
    else:
        with contextlib.suppress(OSError):  # not there yet: the race is the point
            OPERATIONS[operation][0](path)


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_each_operation_is_seen(either, tmp_path, operation):
    path = str(tmp_path / "f")
    found = _races(either, one_operates_the_other_writes, path, operation)
    assert found == {frozenset({(0, "write", path), (1, OPERATIONS[operation][1], path)})}


#: Calls whose audit events carry a directory descriptor, -1 when none was given.
RELATIVE = {
    "mkdir": (lambda p: os.mkdir(p), "mkdir"),
    "rename": (lambda p: os.rename(p, p + ".moved"), "rename from"),
    "remove": (lambda p: os.remove(p), "remove"),
    "utime": (lambda p: os.utime(p), "utime"),
    "chmod": (lambda p: os.chmod(p, 0o600), "chmod"),
}


def one_operates_relatively_the_other_writes(rank, path, operation):
    with contextlib.suppress(OSError):  # whichever comes second may fail: the race is the point
        if rank == 0:
            with open(path, "w") as out:
                out.write("x")
        else:
            RELATIVE[operation][0](os.path.relpath(path))


@pytest.mark.parametrize("operation", sorted(RELATIVE))
def test_a_relative_path_is_recorded_at_the_file_it_names(either, tmp_path, operation):
    """A relative path given no directory descriptor is relative to the working directory
    (its audit event says -1: the launch failed as unrecordable before)."""
    path = str(tmp_path / "f")
    found = _races(either, one_operates_relatively_the_other_writes, path, operation)
    assert found == {frozenset({(0, "write", path), (1, RELATIVE[operation][1], path)})}


def lists_while_the_other_changes_in_place(rank, directory, operation):
    if rank == 0:
        os.listdir(directory)
    else:
        OPERATIONS[operation][0](os.path.join(directory, "f"))


@pytest.mark.parametrize("operation", ["truncate", "chmod", "utime"])
def test_a_listing_does_not_race_with_a_change_in_place(either, tmp_path, operation):
    """A listing sees a directory's entries, not their sizes, modes or times."""
    (tmp_path / "f").write_text("x")
    assert _races(either, lists_while_the_other_changes_in_place, str(tmp_path), operation) == set()


def links_are_made(rank, directory):
    if rank == 0:
        os.symlink(os.path.join(directory, "target"), os.path.join(directory, "soft"))
        os.link(os.path.join(directory, "target"), os.path.join(directory, "hard"))
    else:
        os.listdir(directory)


def test_links_made_are_seen_by_a_listing(either, tmp_path):
    (tmp_path / "target").write_text("x")
    directory = str(tmp_path)
    found = _races(either, links_are_made, directory)
    assert found == {
        frozenset({(0, "symlink", f"{directory}/soft"), (1, "list", directory)}),
        frozenset({(0, "link", f"{directory}/hard"), (1, "list", directory)}),
    }


def through_a_link(rank, alias, real):
    if rank == 0:
        with open(os.path.join(alias, "f"), "w") as out:  # through the directory's link
            out.write("x")
    else:
        os.path.exists(os.path.join(real, "f"))


def test_paths_are_compared_with_their_links_resolved(either, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "alias").symlink_to(real)
    found = _races(either, through_a_link, str(tmp_path / "alias"), str(real))
    path = str(real / "f")
    assert found == {frozenset({(0, "write", path), (1, "exists", path)})}


def removes_the_link_itself(rank, link, target):
    if rank == 0:
        os.remove(link)  # the link goes, not what it points to
    else:
        open(target).close()


def test_removing_a_link_is_not_an_access_of_its_target(either, tmp_path):
    target = tmp_path / "target"
    target.write_text("x")
    (tmp_path / "link").symlink_to(target)
    assert _races(either, removes_the_link_itself, str(tmp_path / "link"), str(target)) == set()


def writes_from_a_thread(rank, path, rendezvous):
    if rank == 0:

        def write():
            with open(path, "w") as out:
                out.write("x")

        writer = threading.Thread(target=write, name="writer")
        writer.start()
        writer.join()
    if rendezvous:
        xm.rendezvous("written")
    if rank == 1:
        os.path.exists(path)


def test_a_thread_a_rank_starts_accesses_as_the_rank(either, tmp_path):
    path = str(tmp_path / "f")
    assert _races(either, writes_from_a_thread, path, True) == set()
    with detecting(), pytest.raises(RaceError) as raised:
        either.run(writes_from_a_thread, (path, False), size=2)
    assert "rank 0 (host 0, its thread writer): write" in str(raised.value)


class _ReadsAFile(torch.utils.data.Dataset):
    def __init__(self, path):
        self.path = path

    def __len__(self):
        return 2

    def __getitem__(self, index):
        return os.path.exists(self.path)


def loads_in_a_worker(rank, path, rendezvous):
    if rank == 1:
        with open(path, "w") as out:
            out.write("x")
    if rendezvous:
        xm.rendezvous("written")
    if rank == 0:
        loader = torch.utils.data.DataLoader(
            _ReadsAFile(path), num_workers=1, multiprocessing_context="fork"
        )
        assert len(list(loader)) == 2


def test_a_dataloader_worker_a_rank_forks_accesses_as_the_rank(world, tmp_path):
    """Rank threads of this process (a worker process of xlasim is daemonic, and Python's
    multiprocessing refuses children to those)."""
    path = str(tmp_path / "f")
    assert _races(world, loads_in_a_worker, path, True) == set()
    with detecting(), pytest.raises(RaceError) as raised:
        world.run(loads_in_a_worker, (path, False), size=2)
    text = str(raised.value)
    assert "it forked): exists" in text and "rank 1 (host 0): write" in text


def forks_then_meets(rank, path):
    if rank == 0:
        batches = iter(
            torch.utils.data.DataLoader(
                _ReadsAFile(path), num_workers=1, multiprocessing_context="fork"
            )
        )  # the worker starts reading now
    xm.rendezvous("the worker started")
    if rank == 1:
        with open(path, "w") as out:
            out.write("x")
    if rank == 0:
        assert len(list(batches)) == 2


def test_a_forked_workers_access_is_not_ordered_by_its_ranks_later_collectives(world, tmp_path):
    """The worker reads whenever it gets to it: the rendezvous its rank joined after forking it
    does not order that read before the other rank's write."""
    path = str(tmp_path / "f")
    found = _races(world, forks_then_meets, path)
    assert found and all({(0, "exists", path), (1, "write", path)} == set(race) for race in found)


def opens_the_victim(rank, path):
    if xr.global_ordinal() == 1:
        with open(path, "w") as out:
            out.write("x")


def test_an_access_that_cannot_be_recorded_fails_the_launch_naming_it(world, tmp_path, monkeypatch):
    resolved = watch_module._resolved

    def failing(path, link):
        if path.endswith("victim"):
            raise OSError("the file system did not answer")
        return resolved(path, link)

    monkeypatch.setattr(watch_module, "_resolved", failing)
    with detecting(), pytest.raises(RaceRecordingError) as raised:
        world.run(opens_the_victim, (str(tmp_path / "victim"),), size=2)
    text = str(raised.value)
    assert "race detection could not record accesses" in text
    assert "rank 1: write " in text and "victim" in text
    assert "OSError: the file system did not answer" in text and "in opens_the_victim" in text
