"""`collectives.txt`: every rank's collectives in program order, with nothing that varies by run.

No times, no process ids: two runs of the same program (threads or worker processes, emulated
or native) give the same text, which plain `diff` compares; `first_divergence` is what
`xlasim trace diff` reports. A line:

    #3 launch 0 | all_reduce #1 in [0, 1] | reduce_type='sum' | [float32[4]] 16 B | at step.py:9 in body

`#3` is the collective's place among its rank's collectives, `#1` its number within its group;
a collective the rank never returned from ends `| unfinished`, one that raised `| raised Error`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .timeline import Collective, Timeline

HEADER = (
    "# xlasim collectives: one line per collective per rank, in program order, without times "
    "(compare with diff or `xlasim trace diff`)"
)
FILE = "collectives.txt"


def line(collective: Collective) -> str:
    status = ""
    if collective.returned is None:
        status = " | unfinished"
    elif collective.error:
        status = f" | raised {collective.error}"
    return (
        f"#{collective.index} launch {collective.launch} | {collective.signature()}{status} "
        f"| at {collective.site}"
    )


def text(timeline: Timeline) -> str:
    out = [HEADER]
    for rank, lanes in timeline.ranks.items():
        out.append(f"rank {rank}")
        out += [f"  {line(c)}" for c in lanes.collectives]
    return "\n".join(out) + "\n"


@dataclass(frozen=True)
class Entry:
    """A parsed line: the rank, its place, what was called, how it ended (`unfinished`,
    `raised Error`, or "" when it returned), and where."""

    rank: int
    index: int
    launch: int
    call: str
    status: str
    site: str

    def describe(self) -> str:
        status = f" | {self.status}" if self.status else ""
        return f"launch {self.launch} | {self.call}{status}"


def parse(content: str) -> dict[int, list[Entry]]:
    ranks: dict[int, list[Entry]] = {}
    rank = None
    for raw in content.splitlines():
        if not raw.strip() or raw.startswith("#"):
            continue
        if raw.startswith("rank "):
            rank = int(raw.split()[1])
            ranks[rank] = []
            continue
        if rank is None:
            raise ValueError(f"a collective line before any `rank N` line: {raw!r}")
        head, site = raw.strip().rsplit(" | at ", 1)
        place, _, launch, call = head.split(" ", 3)
        call = call.removeprefix("| ")
        status = ""
        last = call.rsplit(" | ", 1)
        if len(last) == 2 and (last[1] == "unfinished" or last[1].startswith("raised ")):
            call, status = last
        ranks[rank].append(Entry(rank, int(place.lstrip("#")), int(launch), call, status, site))
    return ranks


def read(path: str | Path) -> dict[int, list[Entry]]:
    """A trace's collectives, from its directory or its `collectives.txt`."""
    path = Path(path)
    if path.is_dir():
        path = path / FILE
    return parse(path.read_text())


@dataclass(frozen=True)
class Divergence:
    rank: int
    index: int
    first: Entry | None
    second: Entry | None

    def describe(self, names: tuple[str, str] = ("A", "B")) -> str:
        def side(name: str, entry: Entry | None) -> str:
            if entry is None:
                return f"  {name}: (no collective #{self.index}: the rank's collectives end here)"
            return f"  {name}: {entry.describe()}\n  {' ' * len(name)}  at {entry.site}"

        return (
            f"first divergence: rank {self.rank}, collective #{self.index}\n"
            f"{side(names[0], self.first)}\n{side(names[1], self.second)}"
        )


def _equal(first: Entry, second: Entry) -> bool:
    return first == second


def first_divergence(
    first: dict[int, list[Entry]], second: dict[int, list[Entry]]
) -> Divergence | None:
    """The earliest place (lowest collective number, then lowest rank) where two traces differ
    in a call or its site; else where they differ in how a call ended (a rank released from a
    wait by another's failure follows the divergence, it is not one); None when equal.

    Args:
        first: one trace's collectives, each rank's in the order it called them (`read`).
        second: the trace compared with it, in the same form.
    """
    for same in (lambda a, b: (a.launch, a.call, a.site) == (b.launch, b.call, b.site), _equal):
        found: list[Divergence] = []
        for rank in sorted(set(first) | set(second)):
            ours, theirs = first.get(rank, []), second.get(rank, [])
            for index in range(max(len(ours), len(theirs))):
                a = ours[index] if index < len(ours) else None
                b = theirs[index] if index < len(theirs) else None
                if a is None or b is None or not same(a, b):
                    found.append(Divergence(rank, index, a, b))
                    break
        if found:
            return min(found, key=lambda d: (d.index, d.rank))
    return None
