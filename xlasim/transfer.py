"""Moving tensors between a rank's XLA device and host memory, in batches.

A collective is a graph cut in emulation: the pending graph of its inputs is executed, the
values are fetched in one call, exchanged on the host, and the results are uploaded in one call.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch_xla


def to_host(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Host copies of `tensors` (XLA or CPU), detached from autograd."""
    xla = [t.detach() for t in tensors if t.device.type == "xla"]
    fetched = iter(torch_xla._XLAC._xla_get_cpu_tensors(xla) if xla else [])
    return [next(fetched) if t.device.type == "xla" else t.detach().clone() for t in tensors]


def to_device(tensors: Sequence[torch.Tensor], device: torch.device | str) -> list[torch.Tensor]:
    """Upload host tensors to one device in a single transfer."""
    device = torch.device(device)
    if device.type != "xla":
        return [t.clone().to(device) for t in tensors]
    contiguous = [t.contiguous() for t in tensors]
    return torch_xla._XLAC._xla_tensors_from_aten(contiguous, [str(device)] * len(tensors), None)
