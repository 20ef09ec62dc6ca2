"""Every emulated `xm` collective, one module each: the one place to read, or add, a collective.

A collective's module (named after it; `tagged_rendezvous.py` is xm.rendezvous) holds its eager
function, with torch_xla's signature and checks; the arithmetic its completed meeting runs, once,
for every member; what dynamo traces in its place (a call of the `xlasim::collective` op,
`compile_dispatch.py`) with the op's shape rule and kernel, or nothing when it cuts the graph;
and its `torch_xla._XLAC` aliases, refused on ranks (`xla_level.py`). It ends with `RECORD`, the
`CollectiveRecord` saying all that. `patches.py` installs `xm_function()` of each record; the op's
kernels (`compiled.py`), the `_XLAC` refusals and tests/core/test_collective_registry.py iterate
`REGISTRY`, whose names are `base/collective_names.py`'s (the list tracing records,
`events/hooks.py`). So adding a collective is one module here and one name there
(docs/architecture.md, "Add a collective"). The modules whose names start with `_` are what the
collectives share: records and shape rules, argument checks, results, reductions.

The meeting's arithmetic is a module-level function (bound with `functools.partial`), not a
closure, so ranks in worker processes can send it to the rendezvous host by pickle. It takes
`payloads`, one list of host tensors per member in group order, which may be views of XLA device
buffers; its results are always new memory, since they are handed to the ranks' devices as views
and must never alias a buffer XLA owns (XLA may reuse it once the buffer is donated).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable

from ...base.collective_names import XM_COLLECTIVES
from ._arguments import host_copies
from ._record import CollectiveRecord

__all__ = ["REGISTRY", "XLAC_ALIASES", "CollectiveRecord", "host_copies", "ordered"]


def ordered(
    records: Iterable[CollectiveRecord], names: Iterable[str]
) -> dict[str, CollectiveRecord]:
    """The records by name in the order of `names`; an error naming what is missing or extra.

    Args:
        records: one record per collective module.
        names: every collective's name, in order (`base/collective_names.py`).
    """
    by_name = {record.name: record for record in records}
    names = tuple(names)
    missing = [name for name in names if name not in by_name]
    extra = sorted(set(by_name) - set(names))
    if missing:
        raise ImportError(
            f"no module of xlasim/emulation/collectives/ declares a RECORD for {missing}, "
            "named in base/collective_names.py"
        )
    if extra:
        raise ImportError(
            f"xlasim/emulation/collectives/ declares {extra}, which base/collective_names.py "
            "does not name: add them there, so tracing records them too"
        )
    return {name: by_name[name] for name in names}


def _records() -> list[CollectiveRecord]:
    """The `RECORD` of each public module of this package."""
    records = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if not isinstance(getattr(module, "RECORD", None), CollectiveRecord):
            raise ImportError(
                f"{module.__name__} declares no RECORD (a CollectiveRecord): every public "
                "module of xlasim/emulation/collectives/ is one collective; what they share "
                "is in the `_` modules"
            )
        records.append(module.RECORD)
    return records


#: Every emulated collective by name, in `base/collective_names.py`'s order.
REGISTRY: dict[str, CollectiveRecord] = ordered(_records(), XM_COLLECTIVES)

#: `torch_xla._XLAC` collectives -> the `xm` collective a rank should call instead.
XLAC_ALIASES: dict[str, str] = {alias: c.name for c in REGISTRY.values() for alias in c.xlac}
