"""Precision modes through the strategy, on the XLA device."""

from types import SimpleNamespace

import pytest
import torch

from fixtures.models import WeightSharingModule
from strategy import XLAStrategy, select_precision


def _forward_backward(precision: str):
    strategy = XLAStrategy(precision=precision)
    strategy.setup_environment()
    model = WeightSharingModule()
    strategy.setup(SimpleNamespace(model=model))
    x = torch.randn(4, 32, device=strategy.root_device)
    inputs = strategy.precision.convert_input({"x": x, "ids": torch.arange(4)})
    with strategy.precision.forward_context():
        hidden = model.layer_1(inputs["x"])
        out = model(inputs["x"])
        loss = out.float().pow(2).mean()
    loss.backward()
    return model, inputs, hidden, out


@pytest.mark.xla
def test_32_true(xla_rank):
    model, inputs, hidden, out = _forward_backward("32-true")
    assert model.layer_1.weight.dtype == torch.float32
    assert (inputs["x"].dtype, hidden.dtype, out.dtype) == (torch.float32,) * 3
    assert model.layer_1.weight.grad.dtype == torch.float32


@pytest.mark.xla
def test_bf16_true_converts_parameters_and_inputs(xla_rank):
    model, inputs, hidden, out = _forward_backward("bf16-true")
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert model.layer_3.weight is model.layer_1.weight  # the dtype change kept the tie
    assert inputs["x"].dtype == torch.bfloat16
    assert inputs["ids"].dtype == torch.int64  # only floating-point inputs are cast
    assert (hidden.dtype, out.dtype) == (torch.bfloat16, torch.bfloat16)
    assert model.layer_1.weight.grad.dtype == torch.bfloat16


@pytest.mark.xla
def test_bf16_mixed_autocasts_ops_and_keeps_float32_parameters(xla_rank):
    model, inputs, hidden, out = _forward_backward("bf16-mixed")
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert inputs["x"].dtype == torch.float32
    assert (hidden.dtype, out.dtype) == (torch.bfloat16, torch.bfloat16)  # matmuls in bf16
    assert model.layer_1.weight.grad.dtype == torch.float32


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("16-mixed", "bfloat16, not float16"),
        ("64-true", "choose one of"),
        ("bf16", "choose one of"),
    ],
)
def test_unsupported_precisions_are_refused(name, hint):
    with pytest.raises(ValueError, match=hint):
        select_precision(name)


def test_precision_names():
    assert select_precision(None).name == "32-true"
    assert select_precision("bf16-mixed").autocast_dtype == torch.bfloat16
    assert select_precision("bf16-true").param_dtype == torch.bfloat16
