"""Writing the event stream: one recorder per process, off unless a run asks for it.

Off, `current()` is None and every hook returns at its first line; the wrappers that emit
events (`hooks.py`) are not even installed until a process records for the first time. On, a
process appends each event as one line to its rank's file, in batches (`_Appender`): at a
launch's end, when a buffer fills, and when the launching process asks before it reads the
directory of a failed launch (worker processes answer a `flush` request; a rank that hangs is
still flushed, a process that crashed loses what it had not written).
Which process a rank lives in does not matter: rank threads of this process, of worker processes
and the native backend's spawned processes all write `DIR/events/rank-R.jsonl` the same way.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from . import model

#: The variable that switches recording on for a launch: the trace directory.
TRACE_ENV = "XLASIM_TRACE"


#: Events a stream holds before writing them out (one `os.write` for all).
BUFFERED_EVENTS = 256


class _Appender:
    """Lines appended to a file in batches: a write per event would cost the ranks more than
    the collective they record (measured: ~65 us per `os.write` from a rank thread here, most of
    it the GIL changing hands), so lines wait in memory until `flush`, which a launch's end, a
    full buffer, and the launching process before it reads a failed run all call."""

    def __init__(self, path: Path):
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._pending: list[str] = []

    def append(self, line: str) -> None:
        """Caller holds the owner's lock."""
        if self._fd is None:
            return
        self._pending.append(line)
        if len(self._pending) >= BUFFERED_EVENTS:
            self.flush()

    def flush(self) -> None:
        if self._fd is not None and self._pending:
            os.write(self._fd, "".join(self._pending).encode())
        self._pending.clear()

    def close(self) -> None:
        """Write what is pending and stop: a rank still unwinding after its launch was
        abandoned (a straggler past the timeout) writes nothing more, and never into a
        descriptor reused since."""
        self.flush()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class RankStream:
    """One rank's events, appended to its file in program order."""

    def __init__(self, path: Path, rank: int):
        self.rank = rank
        self._file = _Appender(path)
        self._lock = threading.Lock()
        self._next = _lines_in(path)
        #: How many collectives this rank did in each group during the current launch.
        self._sequences: dict[tuple[int, ...], int] = {}

    def begin(self, kind: str, **fields: Any) -> int:
        """Record a begin event; returns its number, for the matching `end`."""
        return self._write(kind, model.BEGIN, fields)

    def end(self, begin: int, kind: str, error: str | None = None) -> None:
        """Record the end of the span `begin` opened; `error` names what it raised. Written
        without the JSON encoder: half of all events are ends, and they are all alike."""
        t = time.monotonic_ns()
        tail = f',"error":{json.dumps(error)}' if error else ""
        with self._lock:
            number = self._next
            self._next += 1
            self._file.append(
                f'{{"rank":{self.rank},"kind":"{kind}","ph":"E","t":{t},"n":{number},'
                f'"of":{begin}{tail}}}\n'
            )

    def instant(self, kind: str, **fields: Any) -> None:
        self._write(kind, model.INSTANT, fields)

    def sequence(self, group: tuple[int, ...]) -> int:
        """The number of this rank's next collective in `group` (from 0 in every launch: a
        stream is opened per launch), as XLA matches collectives: by program order within
        their replica group."""
        with self._lock:
            number = self._sequences.get(group, 0)
            self._sequences[group] = number + 1
            return number

    def flush(self) -> None:
        with self._lock:
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def _write(self, kind: str, phase: str, fields: dict[str, Any]) -> int:
        t = time.monotonic_ns()
        encoded = _encode(fields)
        with self._lock:
            number = self._next
            self._next += 1
            self._file.append(
                f'{{"rank":{self.rank},"kind":"{kind}","ph":"{phase}","t":{t},"n":{number}'
                f"{encoded}}}\n"
            )
            return number


_encode_fields = json.JSONEncoder(default=str, separators=(",", ":")).encode
#: A field name that stands for fields encoded beforehand (`encode`), spliced in as they are.
ENCODED = "__encoded__"


def encode(fields: dict[str, Any]) -> str:
    """`fields` as the rest of a JSON object: `,"key":value...` (empty for none)."""
    return "," + _encode_fields(fields)[1:-1] if fields else ""


def _encode(fields: dict[str, Any]) -> str:
    fixed = fields.pop(ENCODED, "")
    if all(type(value) is int for value in fields.values()):  # a collective's `seq`: no encoder
        return "".join(f',"{name}":{value}' for name, value in fields.items()) + fixed
    return encode(fields) + fixed


class Recorder:
    """This process's recording into one trace directory."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self.events = self.directory / model.EVENTS_DIR
        self.events.mkdir(parents=True, exist_ok=True)
        self._streams: dict[int, RankStream] = {}
        self._lock = threading.Lock()
        self._meetings: _Appender | None = None

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
        """An emulated collective completed: when each member reached the rendezvous."""
        line = json.dumps({"group": list(group), "arrivals": arrivals}) + "\n"
        with self._lock:
            if self._meetings is None:
                self._meetings = _Appender(self.events / model.MEETINGS_FILE)
            self._meetings.append(line)

    def flush(self) -> None:
        """Write out every event this process holds (before the directory is read)."""
        with self._lock:
            streams = list(self._streams.values())
            if self._meetings is not None:
                self._meetings.flush()
        for stream in streams:
            stream.flush()

    def close(self) -> None:
        with self._lock:
            for stream in self._streams.values():
                stream.close()
            self._streams.clear()
            if self._meetings is not None:
                self._meetings.close()
                self._meetings = None


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
