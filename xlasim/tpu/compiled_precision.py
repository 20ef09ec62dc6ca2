"""The precision a dot computes at on a TPU: the one in force when a graph of its structure was
first compiled in the process, not necessarily the setting's.

torch_xla reads `set_mat_mul_precision`'s value when it lowers a graph to HLO, and its
compilation cache keys graphs by a hash of their IR (ops, shapes, the inputs' order; no data, no
precision: `XLAGraphExecutor::GetGraphHash`). So a graph compiled before the setting changed runs
its old executable, at the old precision, when it is traced again (pytorch/xla#9129: torch_xla's
`test_mat_mul_precision.py::test_all`, three precisions in one process, is an expected failure;
its TPU CI runs each precision in a process of its own). The emulated MXU puts the precision into
the graph (its passes are IR nodes), so it must choose the precision when a dot is traced: the
one first seen for the dot's key, kept per device. The key is the op, its other arguments, and
torch_xla's graph hash of the dot's operands (the hash its cache keys on), so a dot of the same
structure reached the same way as before keeps the precision it had. The whole graph a TPU
hashes may differ around the dot (the same dot in a bigger graph is a new compile there and
takes the new setting; here it keeps the old one): docs/tpu-arithmetic.md.

Every launch starts fresh processes on a TPU VM, with an empty cache: `forget` clears a rank's
device at each launch.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

_lock = threading.Lock()


@dataclass
class _Compiled:
    """What a device traced since its launch began."""

    #: The setting of its first dot; while every dot had it, `mixed` is False.
    first: str | None = None
    mixed: bool = False
    #: (op, its other arguments, operands' shapes and dtypes): the dots' keys without the hash
    hashed: set[tuple] = field(default_factory=set)
    #: (that, operands' graph hash) -> the precision the first dot of that key was traced at
    precisions: dict[tuple, str] = field(default_factory=dict)


_devices: dict[str, _Compiled] = {}


def precision_for(op: str, operands: Sequence[Any], arguments: Hashable, setting: str) -> str:
    """The precision a dot traced now computes at: the first one its key was traced at on its
    device since the device's last launch, else `setting`.

    torch_xla's graph hash costs ~16 us a dot (a walk of the operands' graph), 8% of the demo's
    training step: while the setting never changed, a dot whose op, arguments and shapes were
    hashed before computes at the setting whatever its hash, and is not hashed again. So of
    several graphs sharing those, traced before a change, only the first is known after it.

    Args:
        op: the aten op (`mm`, `convolution`, ...).
        operands: its XLA tensor operands (and bias), which the graph computes it from.
        arguments: its other arguments that change the compiled graph (strides, scale...).
        setting: torch_xla's current `get_mat_mul_precision()`.
    """
    import torch_xla

    shaped = (op, arguments, tuple((t.shape, t.dtype, t.device.type) for t in operands))
    on_device = [t for t in operands if t.device.type == "xla"]  # not a CPU scalar's
    with _lock:
        compiled = _devices.setdefault(str(on_device[0].device), _Compiled())
        if compiled.first is None:
            compiled.first = setting
        compiled.mixed = compiled.mixed or setting != compiled.first
        if not compiled.mixed and shaped in compiled.hashed:
            return setting
    key = (shaped, torch_xla._XLAC._get_graph_hash(on_device))
    with _lock:
        compiled.hashed.add(shaped)
        return compiled.precisions.setdefault(key, setting)


def forget(device: str) -> None:
    """Forget what `device` compiled, as a new TPU process has compiled nothing.

    Args:
        device: the rank's XLA device (`xla:3`).
    """
    with _lock:
        _devices.pop(device, None)
