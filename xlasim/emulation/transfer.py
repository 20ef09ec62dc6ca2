"""Moving tensors between a rank's XLA CPU device and host memory without copying.

A collective is a graph cut in emulation: the pending graph of its inputs is executed, then the
device buffers are read in place through DLPack (an XLA CPU buffer *is* host memory), the result
is computed on the host, and handed back to each rank's device as a view of that host memory.
XLA never writes into a buffer it did not allocate (in-place ops on the result produce new
buffers), so ranks may share one result buffer safely.

The host tensors lent so are held here until XLA lets go of them (`release_lent`): freed by
Python, never by XLA. Once Python drops a host tensor that a device buffer still holds, torch
keeps its Python object alive from C++, and the thread that frees the buffer last then needs
the GIL. XLA frees an execution's buffers on its own threads as the execution ends, holding the
device's lock; a rank holding the GIL while it waits for that lock (torch_xla's
`_get_graph_hash`, which the TPU arithmetic's precision lookup calls, does) never got it:
torch_xla v2.9's test_ddp.py hung on 2 runs of 5 (docs/conformance.md, "test_ddp.py"). A TPU
has no host memory under its buffers.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence

import torch
import torch_xla
from torch.utils.dlpack import to_dlpack

from ..tpu import memory

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
#: Offset of `DLManagedTensor.dl_tensor.device.device_id`: after `void* data` and `int32 device_type`.
_DEVICE_ID_OFFSET = 12
_ALIGNMENT = 64
#: Host tensors whose memory device buffers borrow (`_view_on`).
_lent: list[torch.Tensor] = []
_lent_lock = threading.Lock()
#: Loans, and bytes, after which the ones XLA let go of are released: a release scans every
#: loan (46 ns each, `timeit`), and what XLA let go of stays allocated until then.
_RELEASE_EVERY = 64
_RELEASE_BYTES = 256 * 2**20
_release_at = _RELEASE_EVERY
_lent_bytes = 0


def to_host(tensors: Sequence[torch.Tensor], copy: bool = False) -> list[torch.Tensor]:
    """Host tensors holding the values of `tensors` (XLA or CPU), detached from autograd.

    XLA tensors are materialized (one execution for all of them) and returned as views of their
    device buffers, valid while the XLA tensors live; `copy=True` gives independent copies
    (needed when the values leave this process).

    Args:
        tensors: XLA or CPU tensors.
        copy: whether to return copies rather than views.
    """
    xla = [t for t in tensors if t.device.type == "xla"]
    if xla:  # the HBM the inputs' graph would take is checked before it runs (xlasim/tpu/memory.py)
        memory.before_execution(str(xla[0].device), xla)
        xla = [t.detach() for t in xla]
        torch_xla._XLAC._xla_sync_multi(xla, devices=[], wait=True, sync_xla_data=False)
    views = iter([torch.from_dlpack(torch_xla._XLAC._to_dlpack(t)) for t in xla])
    host = [next(views) if t.device.type == "xla" else t.detach() for t in tensors]
    return [h.clone() for h in host] if copy else host


def to_device(tensors: Sequence[torch.Tensor], device: torch.device | str) -> list[torch.Tensor]:
    """`tensors` as tensors of `device`; an XLA CPU device gets views of the host memory, a CPU
    device the host tensors themselves.

    Not a copy on the CPU: the participants of a collective on CPU tensors may get one result
    tensor, as they share its memory on XLA devices. Its callers copy out of it: the compiled
    path's kernel (`compiled.py`, which copied its inputs to the host already) hands it to XLA
    as views, torch_xla's `xla` process group copies it into its outputs, and a received
    value is cloned first (`recv`, never aliasing the sender).

    Args:
        tensors: host tensors.
        device: where they go: a rank's XLA device, or the CPU.
    """
    device = torch.device(device)
    if device.type != "xla":
        return [t.to(device) for t in tensors]
    return [_view_on(_viewable(t), device.index or 0) for t in tensors]


def _viewable(host: torch.Tensor) -> torch.Tensor:
    """XLA views need dense memory aligned to 64 bytes (as torch allocates): copy slices that
    are not."""
    if host.is_contiguous() and host.data_ptr() % _ALIGNMENT == 0:
        return host
    return host.clone(memory_format=torch.contiguous_format)


def _view_on(host: torch.Tensor, index: int) -> torch.Tensor:
    capsule = to_dlpack(host)  # a CPU capsule says device 0: point it at the rank's own device
    pointer = _capsule_pointer(capsule, b"dltensor")
    ctypes.c_int32.from_address(pointer + _DEVICE_ID_OFFSET).value = index
    _lend(host)
    return torch_xla._XLAC._from_dlpack(capsule)


def _lend(host: torch.Tensor) -> None:
    """Hold `host` until its device buffer is gone; after `_RELEASE_EVERY` loans or
    `_RELEASE_BYTES` lent, release the ones XLA let go of."""
    global _lent_bytes
    with _lent_lock:
        _lent.append(host)
        _lent_bytes += host.numel() * host.element_size()
        if len(_lent) < _release_at and _lent_bytes < _RELEASE_BYTES:
            return
    release_lent()


def release_lent() -> None:
    """Drop this process's hold on the host tensors no device buffer holds any more (the hold
    is then their only owner: `_use_count() == 1`), so Python frees them, here."""
    global _release_at, _lent_bytes
    with _lent_lock:
        _lent[:] = [host for host in _lent if host._use_count() > 1]
        _release_at, _lent_bytes = len(_lent) + _RELEASE_EVERY, 0
