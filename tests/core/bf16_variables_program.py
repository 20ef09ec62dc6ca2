"""Run by tests/core/test_bf16_variables.py, under `xlasim run --devices 2`, with or without
torch_xla's `XLA_USE_BF16=1` / `XLA_DOWNCAST_BF16=1`. On each rank: a matmul of f32 and of f64
tensors with the TPU arithmetic and with the CPU's exact one (`XLASIM_ARITHMETIC` is read at
each call), and one training step of a linear layer (the graph XLA's verifier refused when the
arithmetic rounded operands XLA already held in bf16: Lightning's 'bf16-true'). Writes
`rank-R.json` per rank into the directory it is given, for the test to judge."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch_xla
import torch_xla.core.xla_model as xm

from xlasim.tpu.arithmetic_choice import ARITHMETIC_ENV


def bf16(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16).to(torch.float64)


def matmuls(device: torch.device) -> dict:
    """Per dtype: the element type XLA holds it in, whether the TPU arithmetic's product equals
    the exact one bit for bit, and its distance from the product of the bf16-rounded operands
    (relative to the sum of the products' magnitudes)."""
    generator = torch.Generator().manual_seed(5)
    a, b = torch.randn(8, 64, generator=generator), torch.randn(64, 8, generator=generator)
    scale = (a.double().abs() @ b.double().abs()).max().item()
    rounded = bf16(a) @ bf16(b)
    found = {}
    for dtype in (torch.float32, torch.float64):
        lhs, rhs = a.to(dtype).to(device), b.to(dtype).to(device)
        products = {}
        for arithmetic in ("tpu", "exact"):
            os.environ[ARITHMETIC_ENV] = arithmetic
            products[arithmetic] = torch.mm(lhs, rhs).cpu().double()
        os.environ.pop(ARITHMETIC_ENV)
        found[str(dtype)] = {
            "element_type": torch_xla._XLAC._get_xla_tensor_shape_type(lhs),
            "tpu_equals_exact": torch.equal(products["tpu"], products["exact"]),
            "from_rounded": (products["tpu"] - rounded).abs().max().item() / scale,
        }
    return found


def training_step(device: torch.device) -> float:
    torch.manual_seed(7)
    layer = torch.nn.Linear(32, 2).to(device)
    optimizer = torch.optim.Adam(layer.parameters(), lr=0.1)
    batch = torch.rand(2, 32).to(device)
    loss = torch.nn.functional.mse_loss(layer(batch), torch.ones(2, 2, device=device))
    loss.backward()
    optimizer.step()
    xm.mark_step()
    return loss.item()


def main(index: int, directory: str) -> None:
    device = torch_xla.device()
    result = {"rank": index, "matmuls": matmuls(device), "loss": training_step(device)}
    (Path(directory) / f"rank-{index}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    torch_xla.launch(main, args=(sys.argv[1],))
