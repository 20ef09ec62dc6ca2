"""What a fault may leave behind: processes below a given one, and the signs of an abort."""

from __future__ import annotations

import os


def descendants(root: int) -> set[int]:
    """Every live (not zombie) process below `root`, read from /proc."""
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone while we looked
        if fields[0] != "Z":
            parents[int(entry)] = int(fields[1])
    found: set[int] = set()
    frontier = [root]
    while frontier:
        pid = frontier.pop()
        children = [child for child, parent in parents.items() if parent == pid]
        found.update(children)
        frontier += children
    return found


def alive(pids: set[int]) -> set[int]:
    """Those of `pids` that still run (zombies count as gone: their parent is gone too)."""
    running = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] != "Z":
                    running.add(pid)
        except OSError:
            pass
    return running


#: What a process prints when the interpreter's exit aborts it (a thread still in XLA's C++).
ABORT_SIGNS = ("terminate called", "Aborted", "core dumped", "Fatal Python error")
