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
