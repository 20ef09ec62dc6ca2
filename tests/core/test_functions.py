"""torch_xla.core.functions: differentiable collectives give correct gradients on emulated ranks."""

import numpy as np
import torch
import torch_xla
import torch_xla.core.functions as xf


def leaf(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32).to(torch_xla.device()).requires_grad_()


def test_all_reduce_sum_gradient_is_the_incoming_gradient(world):
    def fn(rank):
        x = leaf([rank + 1.0, 2.0 * rank])
        y = xf.all_reduce("sum", x, scale=0.5)
        (y * torch.tensor([1.0, 3.0], device=x.device)).sum().backward()
        return y.detach().cpu().numpy(), x.grad.cpu().numpy()

    for y, grad in world.run(fn):
        np.testing.assert_allclose(
            y, [0.5 * sum(r + 1 for r in range(8)), 0.5 * sum(2 * r for r in range(8))]
        )
        np.testing.assert_allclose(grad, [0.5, 1.5])


def test_all_reduce_max_gradient_flows_only_to_the_winner(world):
    def fn(rank):
        x = leaf([float(rank), -float(rank)])
        xf.all_reduce("max", x).sum().backward()
        return x.grad.cpu().numpy()

    grads = world.run(fn, size=4)
    np.testing.assert_array_equal(grads[3], [1.0, 0.0])
    np.testing.assert_array_equal(grads[0], [0.0, 1.0])
    np.testing.assert_array_equal(grads[1], [0.0, 0.0])


def test_all_gather_gradient_is_this_ranks_slice(world):
    def fn(rank):
        x = leaf([[float(rank)]])
        gathered = xf.all_gather(x, dim=0)
        weights = torch.arange(8, dtype=torch.float32, device=x.device).reshape(8, 1) + 1
        (gathered * weights).sum().backward()
        return gathered.detach().cpu().numpy().ravel(), x.grad.cpu().numpy()

    for rank, (gathered, grad) in enumerate(world.run(fn)):
        np.testing.assert_array_equal(gathered, np.arange(8, dtype=np.float32))
        np.testing.assert_array_equal(grad, [[rank + 1.0]])


def test_collective_inside_backward_acts_for_its_rank(world):
    """Autograd runs XLA backward passes on its own C++ threads: their collectives still work."""

    def fn(rank):
        x = leaf([1.0, float(rank)])
        (xf.AllReduceSumLayer.apply(x) * (rank + 1)).sum().backward()
        return x.grad.cpu().numpy()

    expected = sum(r + 1 for r in range(4))  # the backward all_reduce sums every rank's gradient
    for grad in world.run(fn, size=4):
        np.testing.assert_array_equal(grad, [expected, expected])


def test_sync_batch_norm_matches_batch_norm_on_the_global_batch(world):
    generator = torch.Generator().manual_seed(3)
    batches = torch.randn(4, 5, 3, generator=generator)

    def fn(rank):
        norm = xf.SyncBatchNorm(3).to(torch_xla.device())
        x = batches[rank].to(torch_xla.device()).requires_grad_()
        (norm(x) ** 3).sum().backward()
        return norm(x).detach().cpu(), x.grad.cpu()

    reference = torch.nn.BatchNorm1d(3)
    x = batches.reshape(20, 3).requires_grad_()
    out = reference(x)
    (out**3).sum().backward()
    for rank, (value, grad) in enumerate(world.run(fn, size=4)):
        torch.testing.assert_close(
            value, out.detach()[5 * rank : 5 * rank + 5], rtol=1e-4, atol=1e-4
        )
        torch.testing.assert_close(grad, x.grad[5 * rank : 5 * rank + 5], rtol=1e-3, atol=1e-3)
