"""The counters torch_xla's C++ collectives bump as they are traced, kept for emulated ones.

torch_xla counts each collective it traces in its metrics (`xla::AllReduce`, `xla::AllGatherOut`,
`xla::all_gather_into_tensor`, ...: `TORCH_LAZY_FN_COUNTER` in `init_python_bindings.cpp` and
`cross_replica_reduces.cpp`), and its own tests assert them (`pjrt/test_collective_ops_tpu.py`).
Emulated collectives never reach that C++ code, so they count here under the same names, and
`torch_xla.debug.metrics`' counter queries answer with both. Like torch_xla's, the counters
belong to the process: ranks that share one (threads) share them.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_counts: Counter[str] = Counter()
_lock = threading.Lock()
_tracing = threading.local()


def bump(name: str) -> None:
    """Count one traced collective under torch_xla's counter `xla::<name>` (not when it is
    how an op that counted itself is emulated)."""
    if getattr(_tracing, "op", None) is not None:
        return
    with _lock:
        _counts[f"xla::{name}"] += 1


@contextmanager
def traced_as(name: str) -> Iterator[None]:
    """Count one `xla::<name>` for the emulated op run inside, and nothing for the `xm`
    collectives it is emulated with: torch_xla's kernel of that op calls none of them."""
    bump(name)
    _tracing.op = name
    try:
        yield
    finally:
        _tracing.op = None


def _ours() -> dict[str, int]:
    with _lock:
        return dict(+_counts)


def _counter_names(original: Callable[[], list[str]]) -> Callable[[], list[str]]:
    def counter_names() -> list[str]:
        return [*original(), *(name for name in _ours() if name not in original())]

    return counter_names


def _counter_value(original: Callable[[str], Any]) -> Callable[[str], Any]:
    def counter_value(name: str) -> Any:
        ours = _ours().get(name)
        return ours if ours is not None else original(name)

    return counter_value


def _clear_counters(original: Callable[[], Any]) -> Callable[[], Any]:
    def clear_counters() -> Any:
        with _lock:
            _counts.clear()
        return original()

    return clear_counters


def _metrics_report(original: Callable[[], str]) -> Callable[[], str]:
    def metrics_report() -> str:
        ours = "".join(f"Counter: {name}\n  Value: {value}\n" for name, value in _ours().items())
        return original() + ours

    return metrics_report


def patches() -> list[tuple[Any, str, Any]]:
    """`torch_xla.debug.metrics`' counter queries, answering for emulated collectives too."""
    import torch_xla.debug.metrics as met

    return [
        (met, "counter_names", _counter_names(met.counter_names)),
        (met, "counter_value", _counter_value(met.counter_value)),
        (met, "clear_counters", _clear_counters(met.clear_counters)),
        (met, "metrics_report", _metrics_report(met.metrics_report)),
    ]
