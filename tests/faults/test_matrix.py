"""The fault matrix: every fault a rank can commit, on every topology (threads, a process per
core, 2 hosts), in this pytest process. Each cell asserts the named error (rank and call) within
its bound, then that the same world serves the next run, and that no process or directory is
left behind. The table in docs/faults.md is this module's; process-ending faults (Ctrl-C, a
rank's os._exit in the caller's own process) are in test_process_faults.py."""

from __future__ import annotations

import os
import re
import tempfile
import time
from dataclasses import dataclass

import cells
import pytest
import torch
import torch_xla.core.xla_model as xm
from procs import descendants
from topologies import params, topology

import xlasim
from xlasim.ranks.world import World

COLLECTIVE_TIMEOUT_S = 2.0
#: Slack over each cell's own bound for a loaded 2-core machine.
SLACK_S = 3.0


@dataclass(frozen=True)
class Cell:
    fn: object
    error: type[BaseException]
    #: What the error must say, by topology kind ("threads" or "processes": the two hosts
    #: topology reports as "processes").
    text: dict[str, str]
    bound_s: float = 0.0
    args: tuple = ()

    def says(self, name: str) -> str:
        return self.text.get(name if name == "threads" else "processes", self.text.get("any", ""))


def same(text: str) -> dict[str, str]:
    return {"any": text}


MISMATCH = "met at the same collective with calls that do not match"
CELLS = {
    "raises": Cell(cells.raises, ValueError, same(r"rank 1 of \d raised ValueError: rank one")),
    "raises_in_backward": Cell(
        cells.raises_in_backward, ArithmeticError, same(r"rank 1 of \d raised ArithmeticError")
    ),
    "mismatched_op": Cell(
        cells.mismatched_op,
        xlasim.CollectiveMismatchError,
        same(rf"{MISMATCH}[\s\S]*rank 1: all_gather"),
    ),
    "mismatched_shape": Cell(
        cells.mismatched_shape,
        xlasim.CollectiveMismatchError,
        same(r"rank 1: all_reduce\(.*float32\(3,\)"),
    ),
    "mismatched_dtype": Cell(
        cells.mismatched_dtype,
        xlasim.CollectiveMismatchError,
        same(r"rank 1: all_reduce\(.*int32\(2,\)"),
    ),
    "mismatched_root": Cell(
        cells.mismatched_root,
        xlasim.CollectiveMismatchError,
        same(r"rank 1: collective_broadcast\(root_ordinal=1"),
    ),
    "mismatched_groups": Cell(
        cells.mismatched_groups,
        xlasim.CollectiveMismatchError,
        same(
            r"ranks? [0-1-]+ met in other groups \[\(0, 1\)\] instead: the ranks disagree on `groups`"
        ),
    ),
    "skipped_collective": Cell(
        cells.skipped,
        xlasim.CollectiveMismatchError,
        same(r"missing ranks \[1\]\) can never complete.*a rank skipped a collective"),
    ),
    "never_arrives": Cell(
        cells.never_arrives,
        xlasim.CollectiveTimeoutError,
        same(r"rank 1 never arrived; it is running at .*cells.py:\d+ in never_arrives"),
        bound_s=COLLECTIVE_TIMEOUT_S + 1.0,
    ),
    "ends_its_process": Cell(
        cells.ends_its_process,
        xlasim.XlasimError,
        {
            "threads": r"rank 1 called os._exit\(7\): in the threads mode",
            "processes": r"worker process \d \(ranks? [\d-]+\) exited with code 7 during the run",
        },
        bound_s=2.0,
    ),
    "unpicklable_broadcast": Cell(
        cells.unpicklable_broadcast,
        AttributeError,
        same(r"ranks 0-\d of \d raised AttributeError: Can't pickle local object"),
    ),
    "spawn_inside_a_rank": Cell(
        cells.spawn_inside,
        RuntimeError,
        same(r"a world cannot be launched from inside rank \d: xmp.spawn"),
    ),
}
CHECKPOINTS = {
    "corrupt": (b"PK\x03\x04" + b"\x00" * 64, "is truncated or corrupt"),
    "truncated": (None, "is truncated or corrupt"),
    "missing": (b"", "does not exist|not found|No such file"),
}


@pytest.fixture(scope="module")
def worlds(world):
    """The session's threads world (tests/conftest.py: 8 rank threads), and a world of each
    multi-process topology made here; every one with the matrix's collective bound."""
    made: dict[str, World] = {}
    threads_bound = world.collective_timeout
    world.collective_timeout = COLLECTIVE_TIMEOUT_S

    def get(name: str) -> World:
        if name == "threads":
            return world
        if name not in made:
            made[name] = World(topology(name), collective_timeout=COLLECTIVE_TIMEOUT_S)
        return made[name]

    yield get
    world.collective_timeout = threads_bound
    for made_world in made.values():
        made_world.close()


@pytest.fixture
def clean_after(worlds):
    """After the cell: the world serves the next run; no process or directory of ours left."""
    checks = {}

    def watch(name: str) -> World:
        world = worlds(name)
        checks.update(
            name=name,
            world=world,
            processes=len(descendants(os.getpid())),
            dirs=_our_dirs(),
        )
        return world

    yield watch
    if not checks:
        return
    world = checks["world"]
    devices = world.size
    started = time.monotonic()
    assert world.run(cells.all_reduce, timeout=30) == [float(devices)] * devices
    assert time.monotonic() - started < 10, "the next run had to wait for the world to recover"
    assert len(descendants(os.getpid())) == checks["processes"]
    assert _our_dirs() == checks["dirs"]
    if checks["name"] == "hosts":
        assert len(checks["dirs"]) >= 1  # the second host's directory: the check sees it


def _our_dirs() -> set[str]:
    """The emulated hosts' directories made by this process (named after its pid)."""
    return {d for d in os.listdir(tempfile.gettempdir()) if d.startswith(f"xlasim-{os.getpid()}-")}


def _expect(world: World, cell: Cell, name: str):
    started = time.monotonic()
    with pytest.raises(cell.error) as caught:
        world.run(cell.fn, cell.args, timeout=30)
    elapsed = time.monotonic() - started
    assert re.search(cell.says(name), str(caught.value)), str(caught.value)
    assert elapsed < cell.bound_s + SLACK_S
    return caught.value


TOPOLOGIES = params(slow=("hosts",))


@pytest.mark.parametrize("name", TOPOLOGIES)
@pytest.mark.parametrize("cell", list(CELLS))
def test_fault(clean_after, name, cell):
    _expect(clean_after(name), CELLS[cell], name)


@pytest.mark.parametrize("name", [p for p in TOPOLOGIES if p.values[0] != "threads"])
def test_rank_killed(clean_after, name):
    """SIGKILL ends a worker process; in the threads mode it would end this one (no cell)."""
    world = clean_after(name)
    cell = Cell(
        cells.killed,
        xlasim.XlasimError,
        same(r"worker process \d \(ranks? [\d-]+\) was killed by SIGKILL"),
        bound_s=2.0,
    )
    error = _expect(world, cell, name)
    assert "wait in all_reduce" in str(error)  # where the other ranks were


@pytest.mark.parametrize("name", TOPOLOGIES)
@pytest.mark.parametrize("damage", list(CHECKPOINTS))
def test_damaged_checkpoint(clean_after, tmp_path, name, damage):
    from strategy.serialization import save_atomic

    path = tmp_path / "model.ckpt"
    content, says = CHECKPOINTS[damage]
    if damage == "truncated":
        save_atomic({"w": torch.ones(64)}, path)
        content = path.read_bytes()[:-100]
    if damage != "missing":
        path.write_bytes(content)
    else:
        path = tmp_path / "never-written.ckpt"
    world = clean_after(name)
    with pytest.raises(Exception, match=rf"checkpoint .*({says})") as caught:
        world.run(cells.load_checkpoint, (str(path),), timeout=30)
    assert "ranks 0" in str(caught.value)


@pytest.mark.parametrize("name", TOPOLOGIES)
def test_wrong_device_count(clean_after, name):
    world = clean_after(name)
    devices = world.size
    with pytest.raises(
        xlasim.DeviceCountError,
        match=f"asked for {devices + 1} ranks but this world emulates {devices}",
    ):
        world.run(cells.all_reduce, size=devices + 1)


@pytest.mark.parametrize("name", TOPOLOGIES)
def test_collective_outside_a_world(clean_after, name):
    """Outside any rank a collective is torch_xla's world of 1, as in a TPU VM process that
    never spawned (a clone, `scale` ignored), with a warning naming the line on a slice of
    several cores."""
    clean_after(name)
    with pytest.warns(
        xlasim.OutsideWorldWarning,
        match=r"xm\.all_reduce at \S*test_matrix\.py:\d+ .*outside any rank of the emulated \d+-core",
    ):
        result = xm.all_reduce("sum", torch.ones(2), scale=3.0)
    assert torch.equal(result, torch.ones(2))


@pytest.mark.parametrize("name", TOPOLOGIES)
def test_a_run_without_a_timeout_is_still_bounded(clean_after, monkeypatch, name):
    """`World.run(timeout=None)` is bounded by XLASIM_RUN_TIMEOUT (default an hour), so code
    that never reaches the emulation's collectives cannot hang without bound."""
    world = clean_after(name)
    monkeypatch.setenv("XLASIM_RUN_TIMEOUT", "1")
    started = time.monotonic()
    with pytest.raises(xlasim.CollectiveTimeoutError, match=r"did not finish within 1 s"):
        world.run(cells.busy_without_collectives)
    assert time.monotonic() - started < 1 + SLACK_S
