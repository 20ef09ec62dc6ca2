"""Weight tying over drawn module graphs (known bug 1: Lightning #2705, pytorch/xla #2719, #7042).

A drawn graph is a chain of square Linear layers placed at drawn depths in nested containers,
with one or more groups of layers sharing a weight, and some sharing a bias. On every rank,
after `XLAStrategy.setup`: every tied group is one Parameter on the rank's device, the count of
distinct parameters is unchanged, the optimizer holds exactly the model's parameters, and every
replica holds global rank 0's weights. After k optimizer steps on all ranks the groups are still
tied and the replicas still identical; a checkpoint round trip of the module keeps the ties.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch
import torch_xla
import torch_xla.runtime as xr
from drawing import budget
from hypothesis import event, given, reject
from hypothesis import strategies as st
from torch import nn

from strategy import XLAStrategy
from strategy.module import TrainingModule

CONTAINER_NAMES = ("blocks", "inner", "head")
#: torch_xla's graph cache gives a graph another graph's executable when the two differ only in
#: which inputs they share (pytorch/xla #8353, reproduced without xlasim in docs/fidelity.md);
#: tied weights make such graphs. With inputs of other sizes XLA refuses them (the first
#: error); the second was seen once in the sync after a step, in the same runs. Only these
#: upstream failures are excused; any other, and every property below, fails the test.
UPSTREAM_HASH_COLLISION = re.compile(
    r"Executable expected parameter \d+ of size \d+ but got buffer with incompatible size \d+"
    r"|Check failed: tensor_data"
)


@dataclass(frozen=True)
class GraphSpec:
    """Layer i is `Linear(width, width)` at `paths[i]` (containers, then `layer{i}`); layers
    with equal `weight_ids` share one weight (the first one's), likewise `bias_ids`."""

    width: int
    paths: tuple[tuple[str, ...], ...]
    weight_ids: tuple[int, ...]
    bias_ids: tuple[int, ...]

    def layer_name(self, i: int) -> str:
        return ".".join((*self.paths[i], f"layer{i}"))


@st.composite
def graph_specs(draw: st.DrawFn) -> GraphSpec:
    """2 to 5 layers at depth 0 to 2; at least one weight shared by two layers."""
    layers = draw(st.integers(2, 5))
    path = st.lists(st.sampled_from(CONTAINER_NAMES), max_size=2).map(tuple)
    paths = tuple(draw(st.lists(path, min_size=layers, max_size=layers)))
    ids = st.lists(st.integers(0, layers - 1), min_size=layers, max_size=layers)
    weight_ids = draw(ids)
    if len(set(weight_ids)) == layers:  # one tied group at least
        i, j = draw(st.lists(st.integers(0, layers - 1), min_size=2, max_size=2, unique=True))
        weight_ids[j] = weight_ids[i]
    bias_ids = draw(ids)
    return GraphSpec(draw(st.sampled_from([2, 4])), paths, tuple(weight_ids), tuple(bias_ids))


class TiedGraph(TrainingModule):
    """The module a GraphSpec describes, its weights drawn from `generator` (ranks are threads
    sharing the CPU RNG: nn.Linear's own init would race)."""

    def __init__(self, spec: GraphSpec, generator: torch.Generator):
        super().__init__()
        self.names = [spec.layer_name(i) for i in range(len(spec.paths))]
        for i, path in enumerate(spec.paths):
            owner: nn.Module = self
            for name in path:
                if name not in owner._modules:
                    owner.add_module(name, nn.ModuleDict())
                owner = owner._modules[name]
            owner.add_module(f"layer{i}", nn.Linear(spec.width, spec.width))
        with torch.no_grad():
            for param in self.parameters():
                param.copy_(torch.randn(param.shape, generator=generator))
        layers = [self.get_submodule(name) for name in self.names]
        for ids, attribute in ((spec.weight_ids, "weight"), (spec.bias_ids, "bias")):
            owners: dict[int, nn.Module] = {}
            for layer, tie in zip(layers, ids):
                first = owners.setdefault(tie, layer)
                setattr(layer, attribute, getattr(first, attribute))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for name in self.names:
            x = torch.tanh(self.get_submodule(name)(x))
        return x

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return (self(batch) - 0.5).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def tied_groups(module: nn.Module) -> list[list[str]]:
    """Names sharing one Parameter object, group by group (independent of strategy.tying)."""
    names: dict[int, list[str]] = {}
    for name, param in module.named_parameters(remove_duplicate=False):
        names.setdefault(id(param), []).append(name)
    return sorted(group for group in names.values() if len(group) > 1)


def flat(module: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().cpu().reshape(-1) for p in module.parameters()])


def each_group_is_one_parameter_on(module: nn.Module, device: torch.device) -> bool:
    for group in tied_groups(module):
        first = module.get_parameter(group[0])
        if first.device != device or any(module.get_parameter(n) is not first for n in group):
            return False
    return all(p.device == device for p in module.parameters())


def tie_and_train_on_rank(spec: GraphSpec, seed: int, batches, steps: int, path: str) -> dict:
    rank = xr.global_ordinal()
    model = TiedGraph(spec, torch.Generator().manual_seed(seed + rank))  # replicas differ
    groups, count = tied_groups(model), len(list(model.parameters()))
    strategy = XLAStrategy()
    strategy.setup_environment()
    strategy.setup(SimpleNamespace(model=model))
    device = torch_xla.device()
    optimizer = strategy.optimizers[0]
    facts = {
        "groups_before": groups,
        "groups_after_setup": tied_groups(model),
        "count_before": count,
        "count_after_setup": len(list(model.parameters())),
        "tied_on_device": each_group_is_one_parameter_on(model, device),
        "optimizer_holds_model": [id(p) for g in optimizer.param_groups for p in g["params"]]
        == [id(p) for p in model.parameters()],
        "after_setup": flat(model),
    }
    for step in range(steps):
        loss = model.training_step(batches[rank][step].to(device), step)
        loss.backward()
        strategy.optimizer_step(optimizer)
        torch_xla.sync()  # the graph cut MpDeviceLoader makes between steps in real training
        optimizer.zero_grad(set_to_none=True)
    facts["groups_after_training"] = tied_groups(model)
    facts["tied_on_device_after_training"] = each_group_is_one_parameter_on(model, device)
    facts["after_training"] = flat(model)
    strategy.save_checkpoint({"model": model}, path)
    loaded = strategy.load_checkpoint(path, weights_only=False)["model"]
    facts["groups_after_load"] = tied_groups(loaded)
    facts["loaded"] = flat(loaded)
    return facts


@budget(25)
@given(data=st.data())
def test_tied_groups_stay_one_parameter_through_setup_training_and_checkpoints(
    xla_world, world_sizes, data
):
    spec = data.draw(graph_specs(), label="graph")
    world_size = data.draw(st.sampled_from(world_sizes), label="world_size")
    steps = data.draw(st.integers(1, 3), label="steps")
    seed = data.draw(st.integers(0, 2**16), label="seed")
    batches = torch.randn(
        world_size, steps, 2, spec.width, generator=torch.Generator().manual_seed(seed)
    )

    with tempfile.TemporaryDirectory() as directory:
        path = str(Path(directory) / "model.ckpt")
        try:
            results = xla_world.run_on(
                world_size, tie_and_train_on_rank, spec, seed, batches, steps, path
            )
        except Exception as error:
            if UPSTREAM_HASH_COLLISION.search(str(error)):
                # Not this example's fault to judge: Hypothesis discards it (counted in its
                # statistics, `--hypothesis-show-statistics`) and goes on drawing, where an
                # xfail would end the whole property at the first such example.
                event("pytorch/xla #8353: example discarded (docs/fidelity.md, 'Upstream')")
                reject()
            raise

    reference = results[0]
    assert reference["groups_before"], "the drawn graph has no tied group"
    for rank, facts in enumerate(results):
        where = f"on rank {rank}"
        assert facts["groups_after_setup"] == facts["groups_before"], where
        assert facts["count_after_setup"] == facts["count_before"], where
        assert facts["tied_on_device"], f"a tied group is not one device Parameter {where}"
        assert facts["optimizer_holds_model"], where
        assert torch.equal(facts["after_setup"], reference["after_setup"]), (
            f"replicas start from different weights {where}"
        )
        assert facts["groups_after_training"] == facts["groups_before"], where
        assert facts["tied_on_device_after_training"], where
        assert torch.equal(facts["after_training"], reference["after_training"]), (
            f"replicas diverged in training {where}"
        )
        assert facts["groups_after_load"] == facts["groups_before"], where
        assert torch.equal(facts["loaded"], reference["after_training"]), where
    assert not torch.equal(reference["after_training"], reference["after_setup"]), (
        "training did not move the weights: the properties after it would be vacuous"
    )
