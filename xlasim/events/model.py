"""What an event is, and a recorded stream read back.

A recorded directory holds `events/rank-R.jsonl` (one JSON object a line, in rank R's program
order, written by whichever process runs rank R) and `events/meetings.jsonl` (written by the
process that holds the rendezvous: when each member of an emulated collective arrived there).
Times are `time.monotonic_ns()`: one clock for every process of this machine, so events of
different ranks and processes compare directly. See docs/events.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Kinds of events.
LAUNCH = "launch"  # a rank's part of one launch: begin and end
COLLECTIVE = "collective"  # a collective, barrier or rendezvous: begin (entered) and end (returned)
GRAPH = "graph"  # a graph execution (`torch_xla.sync`, `xm.mark_step`): begin and end
CHECKPOINT = "checkpoint"  # a checkpoint write or read (`xm.save`, `torch.save`, ...): begin, end
FILE = "file"  # a file access (open, rename, remove, listing...): instant

#: Phases.
BEGIN, END, INSTANT = "B", "E", "i"

EVENTS_DIR = "events"
MEETINGS_FILE = "meetings.jsonl"


def rank_file(rank: int) -> str:
    return f"rank-{rank}.jsonl"


@dataclass(slots=True)
class Event:
    """One line of a rank's stream.

    `n` numbers the rank's events in program order; an end event names its begin in `of`.
    `fields` holds the kind's own data (a collective's `op`, `group`, `seq`, `signature`,
    `tensors`, `bytes`, `site`; a checkpoint's `op` and `path`; a launch's labels).
    """

    rank: int
    n: int
    kind: str
    phase: str
    t: int
    of: int | None = None
    fields: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_line(cls, line: str) -> Event:
        return cls.from_data(json.loads(line))

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> Event:
        """The event of a decoded line (`data` becomes its `fields`, less the common keys)."""
        pop = data.pop
        return cls(pop("rank"), pop("n"), pop("kind"), pop("ph"), pop("t"), pop("of", None), data)


@dataclass
class Span:
    """A begin event paired with its end (None when the rank never got there: a hang, a
    failure, a crash)."""

    begin: Event
    end: Event | None

    @property
    def kind(self) -> str:
        return self.begin.kind

    @property
    def fields(self) -> dict[str, Any]:
        return self.begin.fields

    @property
    def start(self) -> int:
        return self.begin.t

    def stop(self, otherwise: int) -> int:
        return self.end.t if self.end is not None else otherwise


@dataclass(frozen=True)
class Meeting:
    """An emulated collective's rendezvous: the group, and when each member arrived there."""

    group: tuple[int, ...]
    arrivals: dict[int, int]

    @property
    def last_arrival(self) -> int:
        return max(self.arrivals.values())


def _decoded(path: Path) -> list[Any]:
    """A file's JSON lines, decoded in one call: a traced launch's end reads every event its
    directory holds, and a decoder call per line cost most of reading them. A line cut short
    by a crash (the last, without its newline) is left out."""
    text = path.read_text()
    complete = text[: text.rfind("\n") + 1]
    if not complete:
        return []
    return json.loads("[" + complete[:-1].replace("\n", ",") + "]")


def read_ranks(directory: str | Path) -> dict[int, list[Event]]:
    """Every rank's events, in program order, from a trace directory."""
    root = Path(directory) / EVENTS_DIR
    ranks: dict[int, list[Event]] = {}
    for path in sorted(root.glob("rank-*.jsonl")):
        events = [Event.from_data(data) for data in _decoded(path)]
        if events:
            events.sort(key=_number)
            ranks[events[0].rank] = events
    return dict(sorted(ranks.items()))


def _number(event: Event) -> int:
    return event.n


def read_meetings(directory: str | Path) -> list[Meeting]:
    path = Path(directory) / EVENTS_DIR / MEETINGS_FILE
    if not path.exists():
        return []
    meetings = []
    for data in _decoded(path):
        arrivals = {int(rank): t for rank, t in data["arrivals"].items()}
        meetings.append(Meeting(tuple(data["group"]), arrivals))
    return meetings


def spans(events: list[Event]) -> list[Span]:
    """A rank's begin events paired with their ends, in program order (instants left out)."""
    ends = {e.of: e for e in events if e.phase == END}
    return [Span(e, ends.get(e.n)) for e in events if e.phase == BEGIN]
