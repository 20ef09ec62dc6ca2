"""The rank functions of the fault matrix, one per fault (module level: worker processes
unpickle them by reference). Rank 1 is the faulty rank wherever one rank misbehaves."""

from __future__ import annotations

import os
import signal
import time

import torch
import torch_xla
import torch_xla.core.xla_model as xm

#: Longer than any world's collective timeout in the matrix.
STUCK_S = 30.0


def _ones(n: int = 2, dtype=torch.float32):
    return torch.ones(n, dtype=dtype, device=torch_xla.device())


def all_reduce(rank):
    return xm.all_reduce("sum", _ones(1)).item()


def raises(rank):
    if rank == 1:
        raise ValueError("rank one is broken")
    return all_reduce(rank)


class _FailingBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        raise ArithmeticError("backward of rank one is broken")


def raises_in_backward(rank):
    x = _ones().requires_grad_(True)
    y = _FailingBackward.apply(x) if rank == 1 else x * 2
    y.sum().backward()
    return all_reduce(rank)


def mismatched_op(rank):
    if rank == 1:
        return xm.all_gather(_ones()).sum().item()
    return all_reduce(rank)


def mismatched_shape(rank):
    return xm.all_reduce("sum", _ones(3 if rank == 1 else 2)).sum().item()


def mismatched_dtype(rank):
    return xm.all_reduce("sum", _ones(2, torch.int32 if rank == 1 else torch.float32)).sum().item()


def mismatched_root(rank):
    root = 1 if rank == 1 else 0
    return xm.collective_broadcast([_ones()], root_ordinal=root)[0].sum().item()


def mismatched_groups(rank):
    import torch_xla.runtime as xr

    everyone = list(range(xr.world_size()))
    groups = [everyone[:2], everyone[2:]] if rank < 2 else [everyone]
    return xm.all_reduce("sum", _ones(), groups=groups).sum().item()


def skipped(rank):
    if rank == 1:
        return None
    return all_reduce(rank)


def never_arrives(rank):
    if rank == 1:
        time.sleep(STUCK_S)
    return all_reduce(rank)


def ends_its_process(rank):
    if rank == 1:
        os._exit(7)
    return all_reduce(rank)


def killed(rank):
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return all_reduce(rank)


def unpicklable_broadcast(rank):
    return xm.mesh_reduce("fault", lambda: rank, lambda values: values[0])


def load_checkpoint(rank, path):
    from strategy.checkpoint_io import XLACheckpointIO

    return XLACheckpointIO().load_checkpoint(path)


def spawn_inside(rank):
    import torch_xla.distributed.xla_multiprocessing as xmp

    xmp.spawn(all_reduce)


def uses_the_store(rank):
    """torch.distributed's `xla://` rendezvous, through the world's store."""
    import torch.distributed as dist

    dist.init_process_group("xla", init_method="xla://")
    dist.barrier()
    dist.destroy_process_group()


def busy_without_collectives(rank):
    """Rank 1 never reaches a collective, so only the whole run's bound can end the wait."""
    if rank == 1:
        time.sleep(STUCK_S)
    return rank
