"""XLA counters of this process, and what one run added to them.

torch_xla's metrics are per process: every rank of a process (threads, or the cores of one
worker process) adds to the same counters, so one run's growth is measured per process, from
the first of its ranks to start to the last to finish, and reported on that last rank's outcome.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

COMPILED_GRAPHS = "compiled graphs"
FALLBACK_PREFIX = "aten::"


def counts() -> Counter[str]:
    """This process's compiled-graph count and `aten::` fallback counters."""
    import torch_xla
    import torch_xla.debug.metrics as met

    found = Counter(
        {
            name: met.counter_value(name) or 0
            for name in met.counter_names()
            if name.startswith(FALLBACK_PREFIX)
        }
    )
    found[COMPILED_GRAPHS] = torch_xla._XLAC._xla_get_num_cached_compilation_graph()
    return found


def growth(before: Counter[str]) -> dict[str, int]:
    """What the counters grew by since `before` (counters that did not grow left out)."""
    now = counts()
    now.subtract(before)
    return dict(+now)


_lock = threading.Lock()
#: Open windows, by run: [ranks of this process still running, counts at the first start].
_windows: dict[Any, list[Any]] = {}


def open_window(run: Any, ranks: int) -> None:
    """The first of this process's `ranks` ranks to start in `run` snapshots the counters.

    Args:
        run: the launch (its identity keys the window; `close_window` is given the same).
        ranks: how many of the launch's ranks run in this process; the last of them to call
            `close_window` gets the growth.
    """
    with _lock:
        if id(run) not in _windows:
            _windows[id(run)] = [ranks, counts()]


def close_window(run: Any) -> dict[str, int] | None:
    """The growth over `run`, for the last of this process's ranks to finish (None for others)."""
    with _lock:
        window = _windows[id(run)]
        window[0] -= 1
        if window[0] > 0:
            return None
        del _windows[id(run)]
    return growth(window[1])
