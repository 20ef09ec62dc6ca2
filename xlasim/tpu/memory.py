"""HBM as a TPU has it: each device's live bytes and peak, and a refusal past the chip's HBM.

The XLA CPU client keeps no allocator statistics (`_xla_memory_info` raises UNIMPLEMENTED) and
lists no buffers to Python, so the emulation keeps its own ledger of what each device holds:
the logical bytes (elements x element size) of every live XLA tensor that Python code holds,
pending in the lazy graph or materialized, found in the garbage collector's youngest generation
(at the start of every collection and at every check) and forgotten when the tensor dies. A
view (`t._base` set) is its base's bytes; aliases with one XLA tensor id (`p.data`,
`t.detach()`) count once; a pending tensor torch_xla leaves without a buffer (`patches`) counts
nothing from then on. A pending tensor counts as what it will hold once its graph runs, so
a step that would pass the chip's HBM is refused *before* XLA allocates anything: at every step
marker (`torch_xla.sync()`, `xm.mark_step()`) and before an emulated collective executes its
inputs' graph. What this does not count, and a TPU adds: tensors only C++ holds (activations
autograd saved, until Python reads them), XLA's temporaries while a program runs, padding of
arrays to the TPU's tiles (minor dimension to 128, second-minor to 8 for 32-bit types), the
programs themselves. So `bytes_used` is a lower bound of a TPU's (docs/fidelity.md, "HBM").
"""

from __future__ import annotations

import functools
import gc
import inspect
import itertools
import operator
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..base import rank_context
from ..base.errors import XlasimError
from ..base.public import public

GiB = 2**30


#: A step that adds less than this is let run without asking the kernel what memory is free.
HOST_CHECK_BYTES = 256 * 2**20
#: Host memory left to everything else when an emulated step allocates.
HOST_RESERVE_BYTES = 2 * GiB


@public
class ResourceExhaustedError(XlasimError):
    """A rank's live data would pass its device's HBM (a TPU's RESOURCE_EXHAUSTED)."""


@public
class HostMemoryError(XlasimError):
    """A step within the emulated HBM that this machine's free memory cannot hold."""


@dataclass
class _Device:
    live: int = 0
    #: The most live bytes the device was let execute with.
    peak: int = 0
    #: Live bytes that were already live when the device last executed: in HBM on a TPU.
    resident: int = 0
    #: Executions admitted so far; a buffer made before the last one is resident.
    epoch: int = 0
    #: (XLA tensor id) -> [bytes, Python holders, epoch it was first held in]
    buffers: dict[int, list[int]] = field(default_factory=dict)


_lock = threading.RLock()
_enabled = True
#: device -> {id: weak reference} of its young tensors, not yet counted
_inbox: dict[str, dict[int, weakref.ref]] = {}
#: The types whose objects hold XLA data (torch.Tensor, nn.Parameter), bound by `configure`: the
#: collector's callback also runs while Python shuts down, when torch can no longer be imported.
_data_types: frozenset[type] = frozenset()
_devices: dict[str, _Device] = {}
#: id(Python tensor) -> (its weak reference, device, XLA tensor id)
_holders: dict[int, tuple[weakref.ref, str, int]] = {}


def _device(name: str) -> _Device:
    device = _devices.get(name)
    if device is None:
        device = _devices[name] = _Device()
    return device


def _forget(key: int) -> None:
    with _lock:
        entry = _holders.pop(key, None)
        if entry is None:
            return
        _, name, xla_id = entry
        device = _devices[name]
        buffer = device.buffers[xla_id]
        buffer[1] -= 1
        if buffer[1] == 0:
            del device.buffers[xla_id]
            device.live -= buffer[0]
            if buffer[2] < device.epoch:
                device.resident -= buffer[0]


def track(tensor: Any) -> None:
    """Count `tensor` on its device's ledger (once; a no-op for other tensors, views and
    tensors torch emptied, see `_held_device`)."""
    key = id(tensor)
    # Plain tensors and parameters only: the subclasses torch.compile traces with (fake and
    # functional tensors) say "xla" but hold no XLA data (torch_xla refuses their id).
    if key in _holders or type(tensor) not in _data_types:
        return
    device = _held_device(tensor)
    if device is None or device.type != "xla" or tensor._base is not None:
        return
    name = _device_name(device)
    xla_id = _tensor_id(tensor)
    nbytes = tensor.numel() * tensor.element_size()
    with _lock:
        if key in _holders:
            return
        reference = weakref.ref(tensor, lambda _, key=key: _forget(key))
        _holders[key] = (reference, name, xla_id)
        device = _device(name)
        buffer = device.buffers.setdefault(xla_id, [nbytes, 0, device.epoch])
        buffer[1] += 1
        if buffer[1] == 1:
            device.live += nbytes


_is_xla = operator.attrgetter("is_xla")
#: torch.device -> its name (`xla:3`), the ledger's key
_device_names: dict[Any, str] = {}


def _device_name(device: Any) -> str:
    """`str(device)`, kept: the ledger keys devices by name on every scan and every track."""
    name = _device_names.get(device)
    if name is None:
        name = _device_names[device] = str(device)
    return name


def _unbound_tensor_id(tensor: Any) -> int:
    raise RuntimeError("the HBM ledger is not configured")


#: torch_xla's id of an XLA tensor (aliases share it), bound by `configure`.
_tensor_id: Callable[[Any], int] = _unbound_tensor_id


def _held_device(tensor: Any) -> Any:
    """The device of a tensor the collector found or a weak reference gave back; None when
    torch freed it under us. Either can be a tensor only C++ still holds (a view's base whose
    name is gone, a tensor autograd saved): freed by another thread while this one holds it,
    torch warns "Deallocating Tensor that still has live PyObject references" and empties it
    ("tensor does not have a device"); empty, it holds nothing to count. Not `_fix_weakref`:
    taking such a tensor back from a thread that is freeing it corrupts the heap (seen)."""
    try:
        return tensor.device
    except RuntimeError:
        return None


def _scan_young() -> None:
    """Note the young XLA tensors of every device, to be counted by the thread of the device's
    rank (`_drain`): reading a tensor's sizes and XLA id from another rank's thread would race
    with that rank's autograd (ranks that are threads crashed so); its device is fixed."""
    global _scans_begun
    _scans_begun += 1
    young = gc.get_objects(0)
    # Filtered in C (type(), `is_xla`: no Python frame runs per object; an emptied tensor is
    # not on XLA), the tensors already counted skipped there too: every step marker of every
    # rank scans, and most young tensors are a step's CPU tensors (collectives combine on the
    # host) or counted ones. A step marker collects the youngest generation as it scans
    # (`_scan_emptying_young`), so the next one meets only what was made since.
    tensors = list(itertools.compress(young, map(_data_types.__contains__, map(type, young))))
    if not tensors:
        return
    on_xla = list(itertools.compress(tensors, map(_is_xla, tensors)))
    counted = map(_holders.__contains__, map(id, on_xla))
    for candidate in itertools.compress(on_xla, map(operator.not_, counted)):
        device = _held_device(candidate)
        if device is not None:
            with _lock:
                _inbox.setdefault(_device_name(device), {})[id(candidate)] = weakref.ref(candidate)


#: Scans begun so far (`_scan_young`): one begun after a caller's own tensors were made saw them.
_scans_begun = 0


def _scan_emptying_young() -> None:
    """`_scan_young`, through a collection of the youngest generation when the collector is on.

    Every step marker of every rank scans, and a scan costs what the youngest generation holds:
    up to the collector's threshold (700 objects), most of them older than the last marker.
    Ranks that are threads share one interpreter, so 8 of them listed the same objects one
    after another (1.3x a 4 KB all_reduce step), and a trace's held events (tuples, young
    until a collection stops tracking them) made every scan longer (docs/fidelity.md "HBM").
    Collected here (the collector's callback scans first), the youngest generation holds what
    was made since the last marker. The middle generation is collected here too when its count
    is due, as the interpreter would; the oldest is left to the interpreter's own rule, which it
    applies when the youngest generation overflows (so, in a loop making fewer objects between
    step markers than the threshold, later than without the ledger). A program that turned the
    collector off keeps it off: then the scan lists the young objects without collecting.
    """
    begun = _scans_begun
    if gc.isenabled():
        # `collect` returns at once, and calls no callback, while another thread collects.
        gc.collect(1 if gc.get_count()[1] >= gc.get_threshold()[1] else 0)
    if _scans_begun == begun:
        _scan_young()


def _drain(device: str, scan: bool = True) -> None:
    """Count the tensors noted for `device` (called by its own rank's thread), after noting
    the youngest ones (`scan`)."""
    if scan:
        _scan_emptying_young()
    if device not in _inbox:
        return
    with _lock:
        noted = _inbox.pop(device, {})
    for reference in noted.values():
        tensor = reference()
        if tensor is not None:
            track(tensor)


def _on_collection(phase: str, info: dict[str, int]) -> None:
    if phase == "start" and _enabled:  # the youngest objects, before the collection moves them on
        _scan_young()


def set_accounting(enabled: bool) -> None:
    """Keep the ledger and its checks in this process, or not (benchmarks/probes.py measures
    what they cost; with them off, `bytes_used` stops following the tensors)."""
    global _enabled
    _enabled = enabled


def info(device: str) -> dict[str, int]:
    """The device's `bytes_used` (live) and `peak_bytes_used`, as `xm.get_memory_info` has them."""
    _drain(device)
    with _lock:
        ledger = _device(device)
        return {"bytes_used": ledger.live, "peak_bytes_used": max(ledger.peak, ledger.live)}


def admit(
    device: str,
    limit: int,
    holder: Callable[[], str],
    tensors: Any = (),
    host_available: Callable[[], int | None] = lambda: None,
) -> None:
    """Before `device` executes a graph: refuse, as a TPU does, if its live data (with
    `tensors`, the inputs about to be executed) would pass `limit` bytes.

    Args:
        device: the XLA device about to execute (`xla:3`).
        limit: its HBM in bytes.
        holder: who the device belongs to, for the error (`rank 3 of 8`), asked on refusal.
        tensors: tensors the execution materializes, counted before it runs (then the
            youngest objects are not searched: a collective checks its inputs, cheaply).
        host_available: the bytes this machine can still give (None: unknown); a step that
            fits the HBM but not the machine is refused with `HostMemoryError`.
    """
    _drain(device, scan=not tensors)  # a collective's own inputs are what it adds
    for tensor in tensors:
        track(tensor)
    with _lock:
        ledger = _device(device)
        resident, live = ledger.resident, ledger.live
        if live <= limit and live - resident < HOST_CHECK_BYTES:  # the common case, at once
            ledger.resident, ledger.peak = live, max(ledger.peak, live)
            ledger.epoch += 1
            return
    asked = live - resident
    if live <= limit:
        _check_host(device, holder, asked, host_available)
        with _lock:
            ledger.resident, ledger.peak = ledger.live, max(ledger.peak, ledger.live)
            ledger.epoch += 1
        return
    _discard_pending(device)
    raise ResourceExhaustedError(
        f"RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate "
        f"{_gib(asked)}. That was not possible. There are {_gib(limit - resident)} free "
        f"({holder()}, device {device}: its live data would be {_gib(live)} ({live} bytes) of "
        f"{_gib(limit)} ({limit} bytes) of HBM; {asked} bytes asked, {limit - resident} free). "
        "The step's pending tensors were discarded, as a TPU's failed step leaves them."
    )


def _check_host(
    device: str, holder: Callable[[], str], asked: int, host_available: Callable[[], int | None]
) -> None:
    """Emulated cores share one machine: refuse a step the machine cannot hold, though the
    chip could, rather than let the kernel kill the process (and others)."""
    available = host_available()
    if available is None or asked <= available - HOST_RESERVE_BYTES:
        return
    _discard_pending(device)
    raise HostMemoryError(
        f"{holder()}, device {device}: its step would allocate {_gib(asked)} ({asked} bytes), "
        f"within the emulated HBM, but this machine has {_gib(available)} available "
        f"(keeping {_gib(HOST_RESERVE_BYTES)} for everything else): the emulated cores share "
        "its memory. Emulate fewer cores, or a smaller model. The step's pending tensors were "
        "discarded."
    )


def _discard_pending(device: str) -> None:
    """Drop the device's pending graph (it must never run: it would allocate what was refused)
    and the ledger's entries for its tensors, which now hold nothing."""
    import torch_xla

    _clear_pending(device, inspect.unwrap(torch_xla._XLAC._clear_pending_irs))


def _clear_pending(device: str, clear: Callable[[str], Any]) -> None:
    """`clear(device)` (torch_xla's `_clear_pending_irs`), forgetting the bytes of the device's
    tensors it leaves holding nothing."""
    _drain(device)  # every young tensor of the device known first: each is zeroed below
    with _lock:
        held = [
            (key, reference())
            for key, (reference, name, _) in list(_holders.items())
            if name == device
        ]
    _forget_pending([(key, tensor) for key, tensor in held if tensor is not None], clear, device)


def _forget_pending(held: list[tuple[int, Any]], empty: Callable[..., Any], *args: Any) -> Any:
    """`empty(*args)`, which leaves the pending tensors of `held` ((ledger key, tensor) pairs)
    holding nothing; their entries stay known (never counted again) until the tensors die."""
    import torch_xla

    tensors = [tensor for _, tensor in held]
    pending = torch_xla._XLAC._check_tensor_need_materialization(tensors) if tensors else []
    result = empty(*args)
    with _lock:
        for (key, _), waiting in zip(held, pending):
            entry = _holders.get(key)
            if waiting and entry is not None:
                ledger = _devices[entry[1]]
                buffer = ledger.buffers[entry[2]]
                ledger.live -= buffer[0]
                if buffer[2] < ledger.epoch:
                    ledger.resident -= buffer[0]
                buffer[0] = 0
    return result


def _gib(count: int) -> str:
    return f"{count / GiB:.2f}G"


# ------------------------------------------------------------------------------ the emulation's hooks


#: The emulated generation's HBM per XLA device, and what tells this machine's free memory:
#: set by the emulation when it is installed (`configure`).
_hbm_bytes = 0


def _unknown_host_memory() -> int | None:
    return None


_host_available: Callable[[], int | None] = _unknown_host_memory


def configure(hbm_bytes: int, host_available: Callable[[], int | None]) -> None:
    """Keep the ledger in this process against `hbm_bytes` per device (the emulated
    generation's HBM: a TensorCore's, or a megacore chip's), refusing steps this machine
    cannot hold (`host_available()`: its free bytes, None if unknown).

    Args:
        hbm_bytes: the HBM one emulated XLA device has, in bytes; a step needing more is refused
            as the TPU would.
        host_available: returns this machine's free memory in bytes, or None when it cannot
            tell (then only the HBM limit is checked); asked when a step grows past a
            threshold.
    """
    global _hbm_bytes, _host_available, _data_types, _tensor_id
    import torch
    import torch_xla

    _hbm_bytes, _host_available = hbm_bytes, host_available
    _data_types = frozenset((torch.Tensor, torch.nn.Parameter))
    _tensor_id = torch_xla._XLAC._xla_get_tensor_id
    if _on_collection not in gc.callbacks:
        gc.callbacks.append(_on_collection)


def _holder() -> str:
    rank = rank_context.current()
    return "outside any rank" if rank is None else f"rank {rank.rank} of {rank.world_size}"


def before_execution(device: str, tensors: Any = ()) -> None:
    """`admit` for the calling rank's device against the emulated generation's HBM.

    Args:
        device: the XLA device about to execute.
        tensors: the tensors the execution materializes (a collective's inputs).
    """
    if _enabled and _hbm_bytes:
        admit(device, _hbm_bytes, _holder, tensors, _host_available)


def memory_info(device: Any = None) -> dict[str, int]:
    """`xm.get_memory_info(device)`: the device's live bytes, peak and HBM (default: the
    calling rank's device)."""
    import torch_xla

    name = str(device) if device is not None else str(torch_xla._XLAC._xla_get_default_device())
    return {**info(name), "bytes_limit": _hbm_bytes}


def patches() -> list[tuple[Any, str, Any]]:
    """torch_xla's two ways of leaving a pending tensor without a buffer, forgetting its bytes.

    torch.compile's XLA backend traces each new input shape lazily, compiles the traced graph
    without running it (`_xla_warm_up_cache`: its outputs become placeholders that never get a
    buffer, kept in the backend's cache for the life of the compiled function) and drops what
    else is pending (`_clear_pending_irs`). On a TPU neither holds HBM; counted at their traced
    sizes, a 2-layer decoder compiled with `dynamic=True` at five batch sizes "held" 18 GB.
    """
    import torch_xla

    clear, warm_up = torch_xla._XLAC._clear_pending_irs, torch_xla._XLAC._xla_warm_up_cache
    return [
        (torch_xla._XLAC, "_clear_pending_irs", _clearing(clear)),
        (torch_xla._XLAC, "_xla_warm_up_cache", _warming_up(warm_up)),
    ]


def _clearing(original: Any) -> Any:
    @functools.wraps(original)
    def _clear_pending_irs(device: str) -> None:
        if not _enabled:
            return original(device)
        return _clear_pending(str(device), original)

    return _clear_pending_irs


def _warming_up(original: Any) -> Any:
    @functools.wraps(original)
    def _xla_warm_up_cache(tensors: Any, devices: Any) -> None:
        if not _enabled:
            return original(tensors, devices)
        for tensor in tensors:
            track(tensor)
        held = [(id(tensor), tensor) for tensor in tensors if id(tensor) in _holders]
        return _forget_pending(held, original, tensors, devices)

    return _xla_warm_up_cache


def guarded_step_marker(original: Any) -> Any:
    """torch_xla's step marker (behind `torch_xla.sync()`, `xm.mark_step()`), refusing first
    when the device's live data would pass its HBM."""
    import torch_xla

    @functools.wraps(original)
    def _xla_step_marker(*args: Any, **kwargs: Any) -> Any:
        device = args[0] if args else kwargs.get("device", "")
        before_execution(device or str(torch_xla._XLAC._xla_get_default_device()))
        return original(*args, **kwargs)

    return _xla_step_marker
