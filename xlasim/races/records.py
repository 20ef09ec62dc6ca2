"""What race detection recorded of some ranks, as a message between the machines of a pod
(docs/races.md, "Pods").

Every machine keeps the synchronisations and file accesses of its own ranks only; at a
launch's end each sends the others its ranks' (`MachineRanks`), so that every machine computes
the clocks and races of the whole pod, as one machine would, and names the machine of each
access. JSON, never pickled: a synchronisation's key is a tree of tuples (lists in JSON, tuples
again when read), an access its fields.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .accesses import Access
from .clocks import Sync


@dataclass
class RankRecords:
    """One rank's records: its synchronisations in order, its accesses (None: not recorded),
    and what could not be recorded."""

    syncs: list[Sync]
    accesses: list[Access] | None
    unrecorded: list[str] | None


def encode(records: dict[int, RankRecords]) -> bytes:
    """Some ranks' records, `{rank: RankRecords}`, as a message."""
    tree = {
        str(rank): {
            "syncs": [[s.kind, s.key, list(s.members)] for s in record.syncs],
            "accesses": None
            if record.accesses is None
            else [dataclasses.asdict(a) for a in record.accesses],
            "unrecorded": record.unrecorded,
        }
        for rank, record in records.items()
    }
    return json.dumps(tree).encode()


def decode(message: bytes) -> dict[int, RankRecords]:
    """A message `encode` made, as `{rank: RankRecords}`."""
    records = {}
    for rank, tree in json.loads(message).items():
        syncs = [Sync(kind, _tuples(key), tuple(members)) for kind, key, members in tree["syncs"]]
        accesses = tree["accesses"]
        records[int(rank)] = RankRecords(
            syncs,
            None if accesses is None else [Access(**fields) for fields in accesses],
            tree["unrecorded"],
        )
    return records


def _tuples(value: Any) -> Any:
    """JSON's lists as the tuples they were (keys must hash)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def on_machines(accesses: Sequence[Access] | None, machine: int) -> list[Access] | None:
    """`accesses`, each naming the machine its rank runs on.

    Args:
        accesses: a rank's accesses (None: not recorded).
        machine: the rank's machine.
    """
    if accesses is None:
        return None
    return [dataclasses.replace(a, machine=machine) for a in accesses]
