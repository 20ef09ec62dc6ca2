"""A recorded directory as per-rank timelines: what every trace file is drawn from.

A collective's three times come from different places: entered and returned from its rank's
stream, the last member's arrival from the rendezvous' meeting record (emulation), or, where
there is none (natively, send/recv), from the latest entry among the members' own streams.
"""

from __future__ import annotations

import bisect
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..events import model

#: How a collective is matched across ranks: launch, group, number in that group.
Key = tuple[int, tuple[int, ...], int]


@dataclass
class Collective:
    """One rank's part in one collective."""

    rank: int
    launch: int
    #: Its place among this rank's collectives (program order, counted over the whole trace).
    index: int
    op: str
    group: tuple[int, ...]
    seq: int
    arguments: dict[str, Any]
    tensors: list[list[Any]]
    bytes: int
    site: str
    entered: int
    #: When this rank reached the rendezvous (after fetching its inputs), or `entered`.
    arrived: int
    #: When the last member arrived; None when it never did (a hang) or is not known.
    last_arrived: int | None
    #: None when the rank never returned (a hang, a failure, a crash).
    returned: int | None
    error: str | None

    @property
    def key(self) -> Key:
        return (self.launch, self.group, self.seq)

    def signature(self) -> str:
        """What ranks must agree on, without times or places."""
        arguments = " ".join(f"{k}={v!r}" for k, v in self.arguments.items())
        tensors = ", ".join(f"{dtype}{shape}" for dtype, shape in self.tensors)
        group = f" in {list(self.group)}" if self.group else ""
        return f"{self.op} #{self.seq}{group} | {arguments or '-'} | [{tensors}] {self.bytes} B"


@dataclass
class RankTimeline:
    rank: int
    labels: dict[str, Any]
    spans: list[model.Span]
    collectives: list[Collective] = field(default_factory=list)
    #: The launch each span belongs to (same order as `spans`).
    launches: list[int] = field(default_factory=list)

    def name(self) -> str:
        """`rank 3 · host 0 · chip (1,1,0) core 0 · xla:0`: the trace's name for its process."""
        parts = [f"rank {self.rank}"]
        labels = self.labels
        if "slice_index" in labels:
            parts.append(f"slice {labels['slice_index']}")
        if "host" in labels:
            parts.append(f"host {labels['host']}")
        if "coords" in labels:
            chip = f"chip ({','.join(map(str, labels['coords']))})"
            if "core_on_chip" in labels:
                chip += f" core {labels['core_on_chip']}"
            parts.append(chip)
        elif "name" in labels:
            parts.append(str(labels["name"]))
        if "device" in labels:
            parts.append(str(labels["device"]))
        return " · ".join(parts)


@dataclass
class Timeline:
    ranks: dict[int, RankTimeline]
    #: The earliest event and the end of the trace (the last event, or when it was written).
    start: int
    end: int

    def collectives(self) -> list[Collective]:
        return [c for rank in self.ranks.values() for c in rank.collectives]

    def members(self) -> dict[Key, list[Collective]]:
        """Each collective's members that recorded it, in rank order."""
        found: dict[Key, list[Collective]] = defaultdict(list)
        for collective in self.collectives():
            if collective.group:
                found[collective.key].append(collective)
        return dict(found)


def load(directory: str | Path, until: int | None = None) -> Timeline:
    """The timeline of a recorded directory; unfinished spans (a hang) run to `until` (default:
    when its trace.json was written, else now).

    Args:
        directory: a trace directory holding recorded events.
        until: the end given to spans never closed, in `time.monotonic_ns()` nanoseconds (the
            events' clock); None: when trace.json was written, or now if it was not.
    """
    streams = model.read_ranks(directory)
    arrivals = _arrivals(model.read_meetings(directory))
    ranks: dict[int, RankTimeline] = {}
    times = [e.t for events in streams.values() for e in events]
    start = min(times) if times else 0
    last = max(times) if times else 0
    for rank, events in streams.items():
        spans = model.spans(events)
        launch_labels = next((s.fields for s in spans if s.kind == model.LAUNCH), {})
        timeline = ranks[rank] = RankTimeline(rank, dict(launch_labels), spans)
        launch = -1
        for span in spans:
            if span.kind == model.LAUNCH:
                launch += 1
            timeline.launches.append(max(launch, 0))
            if span.kind == model.COLLECTIVE:
                timeline.collectives.append(
                    _collective(rank, max(launch, 0), len(timeline.collectives), span, arrivals)
                )
    timeline = Timeline(ranks, start, last)
    _fill_last_arrivals(timeline)
    unfinished = any(s.end is None for r in ranks.values() for s in r.spans)
    if unfinished:
        timeline.end = max(last, _written(Path(directory)) if until is None else until)
    return timeline


def _written(directory: Path) -> int:
    """When the trace's files were written (its failure), on the events' clock; now if never."""
    now = time.monotonic_ns()
    try:
        age = time.time() - (directory / "trace.json").stat().st_mtime
    except FileNotFoundError:
        return now
    return now - int(max(age, 0.0) * 1e9)


def _arrivals(meetings: list[model.Meeting]) -> dict[int, tuple[list[int], list[model.Meeting]]]:
    """Per rank: its arrival times at meetings, sorted, and the meetings in the same order."""
    by_rank: dict[int, list[tuple[int, model.Meeting]]] = defaultdict(list)
    for meeting in meetings:
        for rank, t in meeting.arrivals.items():
            by_rank[rank].append((t, meeting))
    result = {}
    for rank, pairs in by_rank.items():
        pairs.sort(key=lambda pair: pair[0])
        result[rank] = ([t for t, _ in pairs], [m for _, m in pairs])
    return result


def _collective(
    rank: int,
    launch: int,
    index: int,
    span: model.Span,
    arrivals: dict[int, tuple[list[int], list[model.Meeting]]],
) -> Collective:
    fields = span.fields
    arrived, last = span.start, None
    times, meetings = arrivals.get(rank, ([], []))
    stop = span.end.t if span.end is not None else None
    # The last rendezvous this rank reached inside the collective (a collective may meet its
    # group more than once: a mesh_reduce's rendezvous and what it is built on).
    position = bisect.bisect_right(times, stop if stop is not None else float("inf")) - 1
    if position >= 0 and times[position] >= span.start:
        arrived, last = times[position], meetings[position].last_arrival
    return Collective(
        rank=rank,
        launch=launch,
        index=index,
        op=fields["op"],
        group=tuple(fields.get("group", ())),
        seq=fields.get("seq", 0),
        arguments=fields.get("arguments", {}),
        tensors=fields.get("tensors", []),
        bytes=fields.get("bytes", 0),
        site=fields.get("site", "?"),
        entered=span.start,
        arrived=arrived,
        last_arrived=last,
        returned=stop,
        error=span.end.fields.get("error") if span.end is not None else None,
    )


def _fill_last_arrivals(timeline: Timeline) -> None:
    """Where no rendezvous recorded it: the last member's entry, once every member entered."""
    for key, members in timeline.members().items():
        complete = len(members) == len(key[1])
        latest = max(m.arrived for m in members)
        for member in members:
            if member.last_arrived is None and complete:
                member.last_arrived = latest
