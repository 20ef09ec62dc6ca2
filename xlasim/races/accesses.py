"""File accesses of ranks, which pairs of them conflict, and which conflicts are races.

Two accesses by different ranks conflict when they touch one path (or one touches a directory
and the other an entry of it: a listing and a file created in it, a directory made and a file
written below it) and at least one changes the file system. Paths are compared after resolving
symbolic links (`watch` records them so). A conflict is a race when no
collective orders the two (`clocks.happened_before` either way): on a TPU either may come
first, so a program that passed here can fail there, after a preemption or on a slow disk.

One idempotent pattern is safe and not reported: `os.makedirs(path, exist_ok=True)` (ENSURE)
on every rank. Ensuring a directory does not race with another rank ensuring it, nor with a
rank's accesses below it once that rank ensured it itself (docs/races.md).
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from .clocks import Clock, happened_before

READ, EXISTS, LIST, STAT = "read", "exists", "list", "stat"
WRITE, REMOVE, RENAME_FROM, RENAME_TO = "write", "remove", "rename from", "rename to"
MKDIR, ENSURE, RMTREE = "mkdir", "makedirs(exist_ok=True)", "rmtree"
TRUNCATE, CHMOD, CHOWN, UTIME = "truncate", "chmod", "chown", "utime"
LINK, SYMLINK = "link", "symlink"

#: Operations that change the file system (the others only look).
CHANGES = frozenset(
    {WRITE, REMOVE, RENAME_FROM, RENAME_TO, MKDIR, ENSURE, RMTREE}
    | {TRUNCATE, CHMOD, CHOWN, UTIME, LINK, SYMLINK}
)
#: Changes that leave a directory's entries as they were (its listing sees nothing of them).
IN_PLACE = frozenset({TRUNCATE, CHMOD, CHOWN, UTIME})
#: Changes whose effect reaches every path below theirs (a directory made, removed, moved, or
#: a link that makes one appear).
TREE_CHANGES = frozenset({REMOVE, RENAME_FROM, RENAME_TO, MKDIR, ENSURE, RMTREE, SYMLINK})


@dataclass(frozen=True)
class Access:
    """One file-system access of one rank.

    Args:
        rank: the rank that made it.
        op: one of the operations above.
        path: absolute and normalised.
        site: the user's line that made it (`file.py:LINE in function`).
        position: how many synchronisations the rank had made before it.
        order: its place among the rank's accesses (program order).
        host: the emulated host of the rank.
        on_host: the path as seen from its host's directory (relative when it is below it):
            hosts of a pod do not share files, and a file one host wrote is missing on another
            under that same name.
        by: who in the rank made it, when not the rank's own thread: a thread it started (made
            at the rank's position then), a process it forked (a DataLoader worker).
        detached: made by a process the rank forked: it happened after the rank's `position`
            synchronisations, but nothing the rank did later waits for it, so no later
            synchronisation of the rank orders it before another rank's access.        machine: the machine of a pod the rank runs on (None: one machine).
    """

    rank: int
    op: str
    path: str
    site: str
    position: int
    order: int = 0
    host: int = 0
    on_host: str = ""
    by: str = ""
    detached: bool = False
    machine: int | None = None

    @property
    def who(self) -> str:
        """The rank and host (and machine, on a pod), and the thread or process of the rank
        when not its own."""
        machine = "" if self.machine is None else f", machine {self.machine}"
        by = f", {self.by}" if self.by else ""
        return f"rank {self.rank} (host {self.host}{machine}{by})"

    def describe(self) -> str:
        return f"{self.who} {self.op} {self.path} at {self.site}"


@dataclass(frozen=True)
class Race:
    """Two conflicting accesses no collective orders."""

    first: Access
    second: Access

    def signature(self) -> tuple:
        """What makes two reports one: the operations and lines, not which ranks."""
        return (self.first.op, self.first.site, self.second.op, self.second.site)


def _below(path: str, directory: str) -> bool:
    return path.startswith(directory.rstrip(os.sep) + os.sep)


def conflict(one: Access, other: Access) -> bool:
    """Whether two accesses by different ranks would give another result in the other order.

    Args:
        one: an access.
        other: an access of another rank.
    """
    if one.op not in CHANGES and other.op not in CHANGES:
        return False
    if one.op == ENSURE and other.op == ENSURE:
        return False
    if one.path == other.path:
        return True
    for listing, change in ((one, other), (other, one)):
        # a change may add or drop an entry of its directory, which a listing sees
        if (
            listing.op == LIST
            and change.op not in IN_PLACE
            and os.path.dirname(change.path) == listing.path
        ):
            return True
    for tree, inside in ((one, other), (other, one)):
        if tree.op in TREE_CHANGES and _below(inside.path, tree.path):
            return True
    return False


def races(accesses: Sequence[Access], clocks: Sequence[Sequence[Clock]]) -> list[Race]:
    """Every conflicting pair of accesses that no synchronisation orders, in a stable order.

    Args:
        accesses: every rank's accesses, each rank's in program order.
        clocks: per rank, its clock after k synchronisations (`clocks.clocks`).
    """
    ensured = _ensured_before(accesses)
    found: list[Race] = []
    for one, other in _candidates(accesses):
        if one.rank == other.rank or not conflict(one, other):
            continue
        if _safe_ensure(one, other, ensured) or _safe_ensure(other, one, ensured):
            continue
        if _ordered(one, other, clocks) or _ordered(other, one, clocks):
            continue
        found.append(Race(*sorted((one, other), key=lambda a: (a.rank, a.position))))
    return found


def _clock(access: Access, clocks: Sequence[Sequence[Clock]]) -> Clock:
    mine = clocks[access.rank]
    return mine[min(access.position, len(mine) - 1)]


def _ordered(earlier: Access, later: Access, clocks: Sequence[Sequence[Clock]]) -> bool:
    if earlier.detached:  # a forked process's access: nothing of its rank waits for it
        return False
    return happened_before(earlier.rank, _clock(earlier, clocks), _clock(later, clocks))


def _ensured_before(accesses: Sequence[Access]) -> dict[int, list[tuple[int, str]]]:
    """Per rank, (order, directory) of each directory it ensured itself."""
    ensured: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for access in accesses:
        if access.op == ENSURE:
            ensured[access.rank].append((access.order, access.path))
    return ensured


def _safe_ensure(ensure: Access, other: Access, ensured: dict) -> bool:
    """`ensure` is a makedirs(exist_ok=True) whose directory `other`'s rank had ensured (it or a
    directory below it) before `other`: whichever ran first, the directory was there."""
    if ensure.op != ENSURE:
        return False
    return any(
        order < other.order and (path == ensure.path or _below(path, ensure.path))
        for order, path in ensured.get(other.rank, ())
    )


def _ancestors(path: str) -> Iterator[str]:
    """The path and every directory above it."""
    yield path
    parent = os.path.dirname(path)
    while parent != path:
        yield parent
        path, parent = parent, os.path.dirname(parent)


def _candidates(accesses: Sequence[Access]) -> Iterator[tuple[Access, Access]]:
    """Pairs that may conflict, each once: a change and an access of its path or below it, a
    change and a listing of its directory (indexed: looks alone are never paired)."""
    changes: dict[str, list[Access]] = defaultdict(list)
    listings: dict[str, list[Access]] = defaultdict(list)
    for access in accesses:
        if access.op in CHANGES:
            changes[access.path].append(access)
        elif access.op == LIST:
            listings[access.path].append(access)
    seen: set[tuple[int, int]] = set()

    def once(one: Access, other: Access) -> bool:
        key = (min(id(one), id(other)), max(id(one), id(other)))
        if one is other or key in seen:
            return False
        seen.add(key)
        return True

    for access in accesses:
        for directory in _ancestors(access.path):
            for change in changes.get(directory, ()):
                if once(access, change):
                    yield access, change
    for path, here in changes.items():
        for change in here:
            for listing in listings.get(os.path.dirname(path), ()):
                if once(change, listing):
                    yield change, listing
