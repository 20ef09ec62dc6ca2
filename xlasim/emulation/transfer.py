"""Moving tensors between a rank's XLA CPU device and host memory without copying.

A collective is a graph cut in emulation: the pending graph of its inputs is executed, then the
device buffers are read in place through DLPack (an XLA CPU buffer *is* host memory), the result
is computed on the host, and handed back to each rank's device as a view of that host memory.
XLA never writes into a buffer it did not allocate (in-place ops on the result produce new
buffers), so ranks may share one result buffer safely.
"""

from __future__ import annotations

import ctypes
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


def to_host(tensors: Sequence[torch.Tensor], copy: bool = False) -> list[torch.Tensor]:
    """Host tensors holding the values of `tensors` (XLA or CPU), detached from autograd.

    XLA tensors are materialized (one execution for all of them) and returned as views of their
    device buffers, valid while the XLA tensors live; `copy=True` gives independent copies
    (needed when the values leave this process).
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
    """`tensors` as tensors of `device`; an XLA CPU device gets views of the host memory."""
    device = torch.device(device)
    if device.type != "xla":
        return [t.clone().to(device) for t in tensors]
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
    return torch_xla._XLAC._from_dlpack(capsule)
