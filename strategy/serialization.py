"""Pickling with XLA tensors turned into host tensors on the way out, and atomic file writes.

Saving device tensors directly breaks in known ways: a tensor and a view of it cannot be saved
together, and a module or a tensor with a pending graph can hang or write a corrupt file
(pytorch/xla #7123). Here every XLA tensor met while pickling (inside any container, object or
module) is replaced by its own host copy. Pickle's memo still sees the original objects, so a
Parameter shared by two modules is written once and comes back shared. Call `torch_xla.sync()`
on every rank first, so the copies are plain transfers of finished values.
"""

from __future__ import annotations

import glob
import io
import os
import pickle
import socket
import types
import uuid
from pathlib import Path
from typing import Any

import torch
from torch import nn

#: Who writes temporary files here: a name safe in a file name, one per machine.
_WRITER = "".join(c if c.isalnum() or c == "-" else "_" for c in socket.gethostname()) or "host"


def _host_copy(tensor: torch.Tensor) -> torch.Tensor:
    host = tensor.detach().cpu()
    if isinstance(tensor, nn.Parameter):
        return nn.Parameter(host, requires_grad=tensor.requires_grad)
    return host.requires_grad_(tensor.requires_grad and tensor.is_leaf)


def _to_local_device(host: torch.Tensor) -> torch.Tensor:
    """Unpickling side of `dumps(..., land_on_device=True)`: onto the loading rank's own device."""
    import torch_xla

    device = torch_xla.device()
    if isinstance(host, nn.Parameter):
        return nn.Parameter(host.detach().to(device), requires_grad=host.requires_grad)
    return host.detach().to(device).requires_grad_(host.requires_grad)


class HostPickler(pickle.Pickler):
    """A pickler that writes every XLA tensor as a host tensor.

    With `land_on_device`, those tensors are recreated on the unpickling rank's own XLA device
    (for broadcasts: a tensor from rank 3's `xla:3` must not land on `xla:3` everywhere);
    otherwise they load as ordinary CPU tensors (for files, loadable with `weights_only=True`).
    """

    def __init__(self, file: Any, protocol: int | None = None, *, land_on_device: bool = False):
        super().__init__(file, protocol)
        self._protocol = pickle.DEFAULT_PROTOCOL if protocol is None else protocol
        self._land_on_device = land_on_device
        # torch.save names storages by address: host copies must outlive the whole dump, or a
        # freed copy's address could be reused by the next one and alias its data.
        self._keep_alive: list[torch.Tensor] = []

    def reducer_override(self, obj: Any) -> Any:
        if not isinstance(obj, torch.Tensor) or obj.device.type != "xla":
            return NotImplemented
        host = _host_copy(obj)
        self._keep_alive.append(host)
        if self._land_on_device:
            return _to_local_device, (host,)
        return host.__reduce_ex__(self._protocol)


# torch.save takes a "pickle module"; it subclasses its Pickler to add storage handling.
_HOST_PICKLE = types.SimpleNamespace(__name__=__name__, Pickler=HostPickler)


def dumps_for_ranks(obj: Any) -> bytes:
    """Pickle `obj` for other ranks: its XLA tensors will load onto each receiver's own device."""
    buffer = io.BytesIO()
    HostPickler(buffer, land_on_device=True).dump(obj)
    return buffer.getvalue()


def save_atomic(obj: Any, path: str | os.PathLike) -> Path:
    """`torch.save` to `path` through a temporary file in the same directory and a rename.

    A reader sees the old file or the complete new one, never a partial write, even if the
    writer is killed midway.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    temporary = path.with_name(f".{path.name}.{_WRITER}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        with open(temporary, "wb") as file:
            torch.save(obj, file, pickle_module=_HOST_PICKLE)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path


def remove_stale_temporaries(path: Path) -> list[Path]:
    """Remove the temporary files of `path` left by writers of this machine that are gone.

    A writer killed midway (SIGKILL, os._exit, a lost host) cannot remove its own temporary
    file, so the next write of the same checkpoint does. Temporaries of live writers, and of
    other machines (a shared filesystem), are left alone: the name says who wrote it."""
    removed = []
    for temporary in path.parent.glob(f".{glob.escape(path.name)}.{_WRITER}.*.tmp"):
        pid = temporary.name[len(f".{path.name}.{_WRITER}.") :].split(".", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            temporary.unlink(missing_ok=True)
            removed.append(temporary)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def load_bytes(data: bytes, *, weights_only: bool) -> Any:
    """`torch.load` from memory, every tensor on the CPU."""
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=weights_only)
