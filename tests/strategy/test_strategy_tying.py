"""Tied weights survive the move to the XLA device (known bug 1), alone and through training."""

from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import DataLoader

from fixtures.data import regression_data
from fixtures.models import NestedTiedModule, WeightSharingModule
from strategy.strategy import XLAStrategy
from strategy.trainer import Trainer
from strategy.tying import (
    count_parameters,
    find_tied_parameters,
    move_module,
    warn_if_count_changed,
)

NESTED_GROUPS = [
    ["stem.weight", "body.0.out.weight", "head.weight"],
    ["body.0.inp.bias", "body.3.inp.bias"],
]


def test_find_tied_parameters_in_nested_modules_and_several_groups():
    assert find_tied_parameters(WeightSharingModule()) == [["layer_1.weight", "layer_3.weight"]]
    assert find_tied_parameters(NestedTiedModule()) == NESTED_GROUPS
    assert find_tied_parameters(torch.nn.Linear(2, 2)) == []


def test_the_count_check_warns_when_ties_are_lost():
    model = WeightSharingModule()
    before = count_parameters(model)
    model.layer_3.weight = torch.nn.Parameter(model.layer_1.weight.detach().clone())  # untied
    with pytest.warns(UserWarning, match="had 2 distinct parameters before .* has 3 after"):
        warn_if_count_changed(model, before)


@pytest.mark.xla
def test_a_plain_move_unties(xla_rank):
    """The bug itself, on this torch/torch_xla: Module.to(xla) makes one Parameter per module."""
    model = WeightSharingModule().to(xla_rank.device)
    assert model.layer_3.weight is not model.layer_1.weight
    assert count_parameters(model) == 3


@pytest.mark.xla
@pytest.mark.parametrize("model_class", [WeightSharingModule, NestedTiedModule])
def test_move_module_reties_every_group(xla_rank, model_class):
    model = model_class()
    groups = find_tied_parameters(model)
    before = count_parameters(model)
    move_module(model, xla_rank.device, dtype=torch.bfloat16)
    assert find_tied_parameters(model) == groups
    assert count_parameters(model) == before  # so the count check did not warn
    for first, *others in groups:
        shared = model.get_parameter(first)
        assert shared.device == xla_rank.device
        assert shared.dtype == torch.bfloat16
        assert all(model.get_parameter(name) is shared for name in others)


@pytest.mark.xla
def test_setup_reties_then_builds_the_optimizer_and_syncs_replicas(xla_rank):
    model = NestedTiedModule()  # built on every rank: ranks share the CPU RNG, so inits differ
    strategy = XLAStrategy()
    strategy.setup_environment()
    strategy.setup(SimpleNamespace(model=model))

    assert find_tied_parameters(model) == NESTED_GROUPS
    optimizer_params = strategy.optimizers[0].param_groups[0]["params"]
    assert [id(p) for p in optimizer_params] == [id(p) for p in model.parameters()]
    assert all(p.device == xla_rank.device for p in optimizer_params)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = strategy.all_gather(flat)
    assert len(gathered) == xla_rank.world_size
    assert all(torch.equal(gathered[0], g) for g in gathered)  # sync_module_states


def _train_tied_model_here(steps: int) -> tuple[list[list[str]], torch.Tensor, int]:
    model = NestedTiedModule()
    trainer = Trainer(strategy=XLAStrategy(), max_steps=steps, progress=False)
    data = regression_data(256, 16, 16)
    result = trainer.fit_here(model, DataLoader(data, batch_size=8, shuffle=True))
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()
    return find_tied_parameters(model), flat, result.global_step


def test_tied_model_trained_on_every_core_keeps_ties_and_replicas_agree(xla_world):
    results = xla_world.run(_train_tied_model_here, 5)

    assert len(results) == xla_world.size
    for groups, flat, steps in results:
        assert groups == NESTED_GROUPS
        assert steps == 5
        assert torch.isfinite(flat).all()
    reference = results[0][1]
    for rank, (_, flat, _) in enumerate(results):
        assert torch.equal(flat, reference), f"rank {rank} holds other parameters than rank 0"
