"""Host memory handed to a rank's device (xlasim/emulation/transfer.py) is released by Python.

A collective's result reaches each rank's device as a view of host memory (DLPack, no copy).
torch keeps the host tensor's Python object alive from C++ once Python drops it while the device
buffer still holds it, and whichever thread frees that buffer last then needs the GIL. XLA frees
an execution's buffers on its own threads when the execution ends, while it still holds the
device's lock; a rank that holds the GIL and waits for that lock (`_get_graph_hash`, behind the
TPU arithmetic's precision lookup, does) then never gets it: torch_xla v2.9's test_ddp.py hung so
on 2 of 5 runs (docs/conformance.md). A TPU has no such buffers, and no such hang.
"""

from __future__ import annotations

import threading
import weakref

import torch
import torch_xla

from xlasim.emulation import transfer

#: Enough products that the execution still runs when the test drops its last name of the input.
CHAIN = 24


def test_host_memory_a_device_buffer_borrowed_is_freed_by_python_not_by_an_xla_thread():
    device = torch_xla.device()
    host = torch.randn(512, 512)
    freed_on: list[int] = []
    weakref.finalize(host, lambda: freed_on.append(threading.get_ident()))
    borrowed = transfer.to_device([host], device)[0]
    del host  # the device buffer is now the only holder of the host memory
    weights = torch.randn(512, 512).to(device) / 16
    result = borrowed
    for _ in range(CHAIN):
        result = torch.tanh(result @ weights)
    torch_xla.sync(wait=False)
    del borrowed  # the execution in flight holds the buffer, and lets it go when it ends
    torch_xla._XLAC._xla_wait_device_ops(devices=[])
    result.cpu()
    transfer.release_lent()

    assert freed_on == [threading.get_ident()], (
        "the host memory under a device buffer was freed by a thread other than this one "
        f"({freed_on}): an XLA thread, which needs the GIL to free it while holding the device"
    )


def test_a_result_for_the_cpu_is_not_copied_again():
    """The compiled path's kernel copies its inputs to the host once (compiled.py); the emulated
    collective's result comes back to the CPU as the same memory, then to XLA as a view."""
    host = torch.arange(6.0)
    (on_cpu,) = transfer.to_device([host], "cpu")
    assert on_cpu.data_ptr() == host.data_ptr()
