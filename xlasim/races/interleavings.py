"""The interleaving a launch took under a schedule: its decisions, the file they are written to,
and the comparison of a replay with what was recorded (docs/races.md, "Schedules").

Every launch under a schedule writes its decisions to `DIR/NAME-schedule-SEED.txt` (`DIR`:
`XLASIM_SCHEDULE_DIR`, else `.xlasim/schedules` in the launching directory; `NAME`: the test or
script, `XLASIM_SCHEDULE_NAME`). The first launch of a name in a process (or since `restart`)
starts its file anew, later ones add to it; before replacing a file, its launches are read back,
and launch n of the new run is compared with launch n of the file: a replay says whether it took
the recorded interleaving, and where it first went another way.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

#: One recorded decision as replays compare it: the rank and the point it went on from.
Key = tuple[int, str]


@dataclass(frozen=True)
class Decision:
    """The scheduler let `rank` go on from `point` (what it did next); `detail` (a path) is
    for people and differs between runs (temporary directories), so it is not compared."""

    rank: int
    point: str
    detail: str = ""

    @property
    def key(self) -> Key:
        return (self.rank, self.point)


@dataclass
class Interleaving:
    """One launch's decisions under schedule `seed`, and how they compare with the recording
    of the same launch, when there was one."""

    seed: int
    decisions: list[Decision]
    #: The file the decisions were written to, and which launch of it this is (from 1).
    file: Path | None = None
    launch: int = 0
    #: The decisions the file held for this launch before (None: nothing recorded).
    recorded: list[Key] | None = field(default=None, repr=False)

    @property
    def keys(self) -> list[Key]:
        return [d.key for d in self.decisions]

    def digest(self) -> str:
        """Equal for equal interleavings (ranks and points, in order)."""
        return digest(self.keys)

    def matches_recording(self) -> bool | None:
        """Whether this launch took the recorded interleaving (None: none was recorded)."""
        return None if self.recorded is None else self.recorded == self.keys

    def comparison(self) -> str:
        """One sentence on this launch against its recording."""
        where = f"{self.file} (launch {self.launch})"
        if self.recorded is None:
            return f"its {len(self.decisions)} decisions are recorded in {where}"
        if self.recorded == self.keys:
            return f"it took the recorded interleaving of {where}: {len(self.decisions)} decisions"
        step = next(
            (i for i, (a, b) in enumerate(zip(self.recorded, self.keys, strict=False)) if a != b),
            min(len(self.recorded), len(self.keys)),
        )
        recorded = _describe(self.recorded, step)
        now = _describe(self.keys, step)
        return (
            f"it took another interleaving than the one recorded in {where}: at decision "
            f"{step + 1} the recording has {recorded}, this run {now} (the program or its "
            "inputs changed, or it depends on something no scheduling point sees)"
        )


def digest(keys: list[Key]) -> str:
    """A short name of the interleaving of `keys`, equal for equal ones.

    Args:
        keys: the decisions, in order.
    """
    text = "\n".join(f"{rank}\t{point}" for rank, point in keys)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _describe(keys: list[Key], index: int) -> str:
    if index >= len(keys):
        return "no more decisions"
    rank, point = keys[index]
    return f"rank {rank} {point}"


_HEADER = "# xlasim: the interleavings of schedule {seed} (docs/races.md); rank, point, detail\n"
_LAUNCH = re.compile(r"^launch (\d+): (\d+) decisions$")


@dataclass
class _Recording:
    """A file this process writes: the launches it held before, and how many it wrote."""

    before: list[list[Key]]
    written: int = 0


_recordings: dict[Path, _Recording] = {}
#: Every interleaving recorded in this process, in order (exploration counts the distinct ones).
taken: list[Interleaving] = []


def file_of(directory: str | os.PathLike, name: str, seed: int) -> Path:
    """The file of schedule `seed`'s interleavings of `name`.

    Args:
        directory: where they are kept.
        name: the test or script (any text: it is made a file name).
        seed: the schedule.
    """
    safe = re.sub(r"[^\w.=-]+", "_", name).strip("_") or "launch"
    return Path(directory).absolute() / f"{safe}-schedule-{seed}.txt"


def restart(name: str) -> None:
    """The next launch of `name` starts its files anew (a test's run, a replay).

    Args:
        name: the test or script.
    """
    prefix = file_of(".", name, 0).name.removesuffix("0.txt")
    for path in [p for p in _recordings if p.name.startswith(prefix)]:
        del _recordings[path]


def record(interleaving: Interleaving, directory: str | os.PathLike, name: str) -> None:
    """Write `interleaving` to its file and compare it with the recording it replaces.

    Args:
        interleaving: a launch's decisions (its `file`, `launch` and `recorded` are set here).
        directory: where the files are kept.
        name: the test or script.
    """
    path = file_of(directory, name, interleaving.seed)
    recording = _recordings.get(path)
    if recording is None:
        recording = _recordings[path] = _Recording(read(path) if path.exists() else [])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_HEADER.format(seed=interleaving.seed))
    recording.written += 1
    interleaving.file, interleaving.launch = path, recording.written
    if recording.written <= len(recording.before):
        interleaving.recorded = recording.before[recording.written - 1]
    lines = [f"launch {recording.written}: {len(interleaving.decisions)} decisions"]
    lines += [f"{d.rank}\t{d.point}\t{d.detail}" for d in interleaving.decisions]
    with path.open("a") as out:
        out.write("\n".join(lines) + "\n")
    taken.append(interleaving)


def read(path: str | os.PathLike) -> list[list[Key]]:
    """The launches of a file `record` wrote, each as its decisions' keys.

    Args:
        path: the file.
    """
    launches: list[list[Key]] = []
    for line in Path(path).read_text().splitlines():
        if line.startswith("#") or not line:
            continue
        if _LAUNCH.match(line):
            launches.append([])
            continue
        rank, point, _ = line.split("\t", 2)
        launches[-1].append((int(rank), point))
    return launches
