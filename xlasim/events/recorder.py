"""Writing the event stream: one recorder per process, off unless a run asks for it.

Off, `current()` is None and every hook returns at its first line; the wrappers that emit
events (`hooks.py`) are not even installed until a process records for the first time. On, a
rank's events are held in memory as tuples and written out as JSON lines, one `os.write` for
many, when its stream is flushed: at a launch's end, when the buffer fills, and when the
launching process asks before it reads the directory of a failed launch (worker processes answer
a `flush` request, spawned ones a signal: `flushing.py`; a rank that hangs is still flushed, a
process that crashed loses what it had not written).
Which process a rank lives in does not matter: rank threads of this process, of worker processes
and the native backend's spawned processes all write `DIR/events/rank-R.jsonl` the same way.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import model

#: The variable that switches recording on for a launch: the trace directory.
TRACE_ENV = "XLASIM_TRACE"


#: Events a stream holds before writing them out: a recorded call costs a tuple appended to a
#: list; the JSON lines are made when the stream is flushed (a launch's end, a full buffer, a
#: request from the launching process or a signal: `flushing.py`).
HELD_EVENTS = 4096

#: How a held event's own fields become JSON: `render(stream, a, b)` returns `,"key":value...`
#: from the two values the event was held with. Called when the stream is flushed, in the
#: rank's program order, under the flush lock.
Render = Callable[["RankStream", Any, Any], str]

#: What a held event is, by number (`slot`): its kind, phase and renderer. Events hold the
#: number, not the three: a held event is a tuple of numbers and strings, which the garbage
#: collector stops tracking at its first pass (held containers would be promoted and make the
#: interpreter's full collections, over all of torch's objects, come several times as often:
#: measured, most of what recording cost).
_slots: list[tuple[str, str, Render]] = []
_slot_numbers: dict[tuple[str, str, Render], int] = {}
_registering = threading.Lock()


def slot(kind: str, phase: str, render: Render) -> int:
    """The number of events of `kind` and `phase` whose fields `render` makes (registered the
    first time it is asked for).

    Args:
        kind: the events' kind (`model.COLLECTIVE`...).
        phase: `model.BEGIN`, `model.END` or `model.INSTANT`.
        render: what makes a held event's fields, at flush.
    """
    key = (kind, phase, render)
    number = _slot_numbers.get(key)
    if number is None:
        with _registering:
            number = _slot_numbers.get(key)
            if number is None:
                _slots.append(key)
                number = _slot_numbers[key] = len(_slots) - 1
    return number


class RankStream:
    """One rank's events, in program order.

    Recording is the hot path (a collective of a few KB takes tens of microseconds on a rank
    thread, and every rank's Python runs under one GIL): an event is a tuple of plain values
    appended to a list, without a lock (`itertools.count` and `list.append` are atomic),
    numbered as it happens; turning it into its JSON line, and whatever depends on the order
    of events (a collective's number in its group), waits for `flush`, which holds the only
    lock.
    """

    def __init__(self, path: Path, rank: int):
        self.rank = rank
        #: The world size the rank's launch saw (for collectives over every rank).
        self.world: int | None = None
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._held: list[tuple] = []
        self._numbers = itertools.count(_lines_in(path))
        self._flushing = threading.Lock()
        #: How many collectives this rank did in each group during the current launch.
        self._sequences: dict[tuple[int, ...], int] = {}

    def hold(self, slot: int, a: Any, b: Any = None) -> int:
        """Record an event of `slot` now, its fields made at flush from `a` and `b`; returns
        its number.

        Args:
            slot: what the event is (`slot(kind, phase, render)`).
            a: the renderer's first value. Plain values (numbers, strings, None): they must
                not change after the call, nor be containers the garbage collector tracks
                (see `_slots`).
            b: the renderer's second value, under the same rules; None when it takes one.
        """
        number = next(self._numbers)
        self._held.append((number, time.monotonic_ns(), slot, a, b))
        if len(self._held) >= HELD_EVENTS:
            self.flush()
        return number

    def begin(self, kind: str, **fields: Any) -> int:
        """Record a begin event; returns its number, for the matching `end`.

        Args:
            kind: what the span is (`model.LAUNCH`, `model.COLLECTIVE`...).
            fields: the event's own fields, written as JSON (values JSON does not know as
                their `str`); the dict is kept until flush, so they must not change.
        """
        return self.hold(slot(kind, model.BEGIN, render_fields), fields)

    def end(self, begin: int, kind: str, error: str | None = None) -> None:
        """Record the end of the span `begin` opened.

        Args:
            begin: the number `begin` returned for the span.
            kind: the span's kind, as given to `begin`.
            error: the type name of the exception the span raised, None if it raised nothing.
        """
        self.hold(slot(kind, model.END, render_end), begin, error)

    def instant(self, kind: str, **fields: Any) -> None:
        """Record an event without duration (a file access).

        Args:
            kind: what the event is (`model.FILE`).
            fields: the event's own fields, as for `begin`.
        """
        self.hold(slot(kind, model.INSTANT, render_fields), fields)

    def sequence(self, group: tuple[int, ...]) -> int:
        """The number of this rank's next collective in `group` (from 0 in every launch: a
        stream is opened per launch), as XLA matches collectives: by program order within
        their replica group. Renderers call it, in program order, while the stream flushes."""
        number = self._sequences.get(group, 0)
        self._sequences[group] = number + 1
        return number

    def flush(self) -> None:
        """Write out the events held so far, as JSON lines, with one `os.write`. Safe from any
        thread while the rank records: events appended meanwhile wait for the next flush."""
        with self._flushing:
            self._write_held()

    def close(self) -> None:
        """Write what is held and stop: a rank still unwinding after its launch was abandoned
        (a straggler past the timeout) writes nothing more, and never into a descriptor
        reused since."""
        with self._flushing:
            self._write_held()
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _write_held(self) -> None:
        """Caller holds `_flushing`."""
        held = self._held
        count = len(held)
        if not count:
            return
        batch = held[:count]
        del held[:count]
        if self._fd is None:  # closed: a straggler still unwinding writes nothing more
            return
        batch.sort(key=_number)
        lines = []
        for number, t, slot_number, a, b in batch:
            kind, phase, render = _slots[slot_number]
            lines.append(
                f'{{"rank":{self.rank},"kind":"{kind}","ph":"{phase}","t":{t},"n":{number}'
                f"{render(self, a, b)}}}\n"
            )
        os.write(self._fd, "".join(lines).encode())


def _number(event: tuple) -> int:
    return event[0]


def render_end(stream: RankStream, begin: int, error: str | None) -> str:
    """An end event's fields: the number of its begin, and what it raised.

    Args:
        stream: the rank's stream being flushed (unused: the renderers' common signature).
        begin: the number of the span's begin event.
        error: the type name of what the span raised; None: nothing (no `error` field).
    """
    return f',"of":{begin},"error":{json.dumps(error)}' if error else f',"of":{begin}'


_encode_fields = json.JSONEncoder(default=str, separators=(",", ":")).encode


def encode(fields: dict[str, Any]) -> str:
    """`fields` as the rest of a JSON object: `,"key":value...` (empty for none); values JSON
    does not know are written as their `str`."""
    return "," + _encode_fields(fields)[1:-1] if fields else ""


def render_fields(stream: RankStream, fields: dict[str, Any], unused: None) -> str:
    """The renderer of events recorded with their fields as a dict (launches, file accesses:
    few, so the dict they hold is no burden).

    Args:
        stream: the rank's stream being flushed (unused: the renderers' common signature).
        fields: the event's fields, as recorded.
        unused: the second value renderers take; these events hold none.
    """
    return encode(fields)


class Recorder:
    """This process's recording into one trace directory."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self.events = self.directory / model.EVENTS_DIR
        self.events.mkdir(parents=True, exist_ok=True)
        self._streams: dict[int, RankStream] = {}
        self._lock = threading.Lock()
        #: Completed meetings not written yet: (group, arrivals), made into lines at `flush`.
        self._meetings: list[tuple[tuple[int, ...], dict[int, int]]] = []

    def open(self, rank: int) -> RankStream:
        """Rank `rank`'s stream for a new launch: its file opened afresh (the directory may
        have been cleared since the last launch), the numbering continued from what is there."""
        with self._lock:
            old = self._streams.pop(rank, None)
            if old is not None:
                old.close()
            stream = self._streams[rank] = RankStream(self.events / model.rank_file(rank), rank)
            return stream

    def stream(self, rank: int) -> RankStream | None:
        return self._streams.get(rank)

    def only_stream(self) -> RankStream | None:
        """The stream of the one rank this process runs, if it runs exactly one."""
        streams = list(self._streams.values())
        return streams[0] if len(streams) == 1 else None

    def meeting(self, group: tuple[int, ...], arrivals: dict[int, int]) -> None:
        """An emulated collective completed: when each member reached the rendezvous
        (`arrivals` is not changed afterwards: the rendezvous is done with it).

        Args:
            group: the collective's participants, in the order the rendezvous was given them.
            arrivals: when each member arrived, by rank, in `time.monotonic_ns()` nanoseconds.
        """
        self._meetings.append((group, arrivals))
        if len(self._meetings) >= HELD_EVENTS:
            self._flush_meetings()

    def flush(self) -> None:
        """Write out every event this process holds (before the directory is read)."""
        self._flush_meetings()
        with self._lock:
            streams = list(self._streams.values())
        for stream in streams:
            stream.flush()

    def _flush_meetings(self) -> None:
        with self._lock:
            count = len(self._meetings)
            meetings = self._meetings[:count]
            del self._meetings[:count]
            if meetings:
                lines = "".join(
                    json.dumps({"group": list(group), "arrivals": arrivals}) + "\n"
                    for group, arrivals in meetings
                )
                with open(self.events / model.MEETINGS_FILE, "a") as stream:
                    stream.write(lines)

    def close(self) -> None:
        self.flush()
        with self._lock:
            for stream in self._streams.values():
                stream.close()
            self._streams.clear()


def _lines_in(path: Path) -> int:
    with open(path, "rb") as stream:
        return sum(1 for _ in stream)


_current: Recorder | None = None
_switch = threading.Lock()


def current() -> Recorder | None:
    """This process's recorder, or None when recording is off (the hooks' first check)."""
    return _current


def start(directory: str | Path) -> Recorder:
    """Record into `directory` (the same recorder again when it already does)."""
    global _current
    with _switch:
        if _current is not None and _current.directory == Path(directory):
            return _current
        if _current is not None:
            _current.close()
        _current = Recorder(directory)
        return _current


def stop() -> None:
    global _current
    with _switch:
        if _current is not None:
            _current.close()
        _current = None
