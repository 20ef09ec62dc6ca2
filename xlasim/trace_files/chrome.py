"""`trace.json`: the timeline in the Chrome trace event format, for Perfetto and chrome://tracing.

One process per rank (named by rank, host and chip, sorted by rank), with lanes (threads) for
compute (launches, graph executions), collectives, waits (from a rank's arrival to its last
member's) and checkpoints; each collective's members are joined by a flow arrow, in rank order.
Times are microseconds from the first event. The format:
https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..events import model
from .timeline import Collective, Timeline

COMPUTE, COLLECTIVES, WAITS, CHECKPOINTS = 0, 1, 2, 3
LANES = {COMPUTE: "compute", COLLECTIVES: "collectives", WAITS: "waits", CHECKPOINTS: "checkpoints"}
_LANE_OF = {model.LAUNCH: COMPUTE, model.GRAPH: COMPUTE, model.CHECKPOINT: CHECKPOINTS}
FLOW_CATEGORY = "collective"


def events(timeline: Timeline) -> list[dict[str, Any]]:
    """Every trace event of the timeline, metadata first."""

    origin = timeline.start

    def us(t: int) -> float:
        return (t - origin) / 1000

    out: list[dict[str, Any]] = []
    for rank, lanes in timeline.ranks.items():
        out.append(_metadata("process_name", rank, 0, name=lanes.name()))
        out.append(_metadata("process_sort_index", rank, 0, sort_index=rank))
        for tid, name in LANES.items():
            out.append(_metadata("thread_name", rank, tid, name=name))
            out.append(_metadata("thread_sort_index", rank, tid, sort_index=tid))
        for span in lanes.spans:
            if span.kind == model.COLLECTIVE:
                continue
            name = "launch" if span.kind == model.LAUNCH else span.fields.get("op", span.kind)
            out.append(
                _slice(
                    name,
                    span.kind,
                    rank,
                    _LANE_OF.get(span.kind, COMPUTE),
                    origin,
                    span.start,
                    span.stop(timeline.end),
                    _arguments(span.fields, span.end),
                )
            )
        for collective in lanes.collectives:
            out += _collective(collective, timeline, us)
    for flow, (_, members) in enumerate(sorted(timeline.members().items())):
        out += _flow(flow, sorted(members, key=lambda m: m.entered), us)
    return out


def _metadata(kind: str, pid: int, tid: int, **args: Any) -> dict[str, Any]:
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": args}


def _slice(
    name: str, category: str, pid: int, tid: int, origin: int, start: int, stop: int, args: dict
) -> dict[str, Any]:
    """A complete event from `start` to `stop` (nanoseconds on the events' clock), in
    microseconds from `origin`: whole nanoseconds over 1000, which print in at most three
    decimals (a difference of two such floats prints in seventeen digits, and encoding
    those is a third of writing the file)."""
    return {
        "ph": "X",
        "name": name,
        "cat": category,
        "pid": pid,
        "tid": tid,
        "ts": (start - origin) / 1000,
        "dur": max(stop - start, 0) / 1000,
        "args": args,
    }


def _arguments(fields: dict[str, Any], end: model.Event | None) -> dict[str, Any]:
    args = dict(fields)
    if end is None:
        args["unfinished"] = True
    elif end.fields.get("error"):
        args["error"] = end.fields["error"]
    return args


def _collective(collective: Collective, timeline: Timeline, us) -> list[dict[str, Any]]:
    stop = collective.returned if collective.returned is not None else timeline.end
    args: dict[str, Any] = {
        "group": list(collective.group),
        "seq": collective.seq,
        "bytes": collective.bytes,
        "tensors": collective.tensors,
        "site": collective.site,
        "entered_us": us(collective.entered),
        "last_member_arrived_us": (
            us(collective.last_arrived) if collective.last_arrived is not None else None
        ),
        "returned_us": us(collective.returned) if collective.returned is not None else None,
        **collective.arguments,
    }
    if collective.returned is None:
        args["unfinished"] = True
    if collective.error:
        args["error"] = collective.error
    out = [
        _slice(
            collective.op,
            model.COLLECTIVE,
            collective.rank,
            COLLECTIVES,
            timeline.start,
            collective.entered,
            stop,
            args,
        )
    ]
    waited_until = collective.last_arrived if collective.last_arrived is not None else stop
    if waited_until > collective.arrived:
        name = f"wait: {collective.op} #{collective.seq}"
        if collective.last_arrived is None:
            name += " (never met)"
        out.append(
            _slice(
                name,
                "wait",
                collective.rank,
                WAITS,
                timeline.start,
                collective.arrived,
                waited_until,
                {"group": list(collective.group), "site": collective.site},
            )
        )
    return out


def _flow(flow: int, members: list[Collective], us) -> list[dict[str, Any]]:
    """An arrow through the members' slices in the order they entered: start at the first,
    steps, finish at the last."""
    if len(members) < 2:
        return []
    out = []
    for position, member in enumerate(members):
        phase = "s" if position == 0 else "f" if position == len(members) - 1 else "t"
        event = {
            "ph": phase,
            "id": flow,
            "name": member.op,
            "cat": FLOW_CATEGORY,
            "pid": member.rank,
            "tid": COLLECTIVES,
            "ts": us(member.entered),
        }
        if phase != "s":
            event["bp"] = "e"  # bind to the enclosing slice, the member's collective
        out.append(event)
    return out


def write(timeline: Timeline, path: str | Path) -> None:
    """Write `trace.json`, encoded in one piece (`_encoded`).

    Args:
        timeline: the recorded launch, loaded (`timeline.load`).
        path: the file to write (replaced if it exists).
    """
    document = {"traceEvents": events(timeline), "displayTimeUnit": "ms"}
    Path(path).write_bytes(_encoded(document))


def _encoded(document: dict[str, Any]) -> bytes:
    """`document` as JSON: with orjson where it is installed (the `trace` extra), else with the
    standard library's C encoder (`json.dumps`; `json.dump` to a file runs the pure Python one:
    measured 10x slower), without its check for circular references (what `events` makes has
    none; the check keeps a dictionary of every container it enters: a third of its time).
    The launching process writes the files after its ranks finish, in one thread, so a traced
    launch waits for it: with orjson the whole write costs 5.4-5.5 us of CPU per event, against
    8.5-8.8 us (`benchmarks/tracing.py demo`, docs/tracing.md)."""
    try:
        import orjson
    except ImportError:
        return json.dumps(document, check_circular=False).encode()
    return orjson.dumps(document)
