"""SPMD properties (issue 17): sharding never changes what a program computes, FSDPv2 training is
single-device training, sharded checkpoints restore onto any mesh, and shardings round-trip.

Every test runs once in the session's SPMD world (`@pytest.mark.xla(spmd=True)`: SPMD on, every
device of the slice visible), where Hypothesis draws and runs its examples: the marked test is
a plain function that calls the property (the SPMD worker gets the test by pickling, and a
function wrapped by Hypothesis's `given` does not pickle). They need at least
two devices (one device shards nothing) and skip with that reason on fewer.

Tolerances: sharding a dimension that a sum runs over (the batch in a weight gradient, the input
features in a product) makes each device add its part and an all-reduce add the parts: the same
float32 terms summed in another order. With at most 8 terms of size O(1) per sum, such results
differ from the unsharded ones by a few ulps, so they are compared with rtol 1e-5 and atol 1e-6
(float32's epsilon is 1.2e-7); a dropped or doubled part changes them by O(1/8) or more. Both
programs compute at the TPU's default precision (docs/tpu-arithmetic.md): every operand is
rounded to bf16 the same way whatever its sharding, so the bound is still the f32 sums' order.
Everything else (parameter and batch layouts, checkpoint values) is compared exactly.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch_xla
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr
from drawing import budget
from hypothesis import given, settings
from hypothesis import strategies as st
from spmd_programs import (
    BATCHES,
    WIDTHS,
    assert_layout,
    batch_layout,
    fsdp_spec,
    mesh_shapes,
    mlp,
    partition_specs,
    sharding_text,
)
from torch.utils.data import DataLoader, TensorDataset

from strategy import SingleDeviceXLAStrategy
from strategy.spmd import SPMDStrategy, make_mesh
from strategy.trainer import Trainer

TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}  # see the module docstring

spmd = pytest.mark.xla(spmd=True, min_devices=2)


def few(cap: int) -> settings:
    """At most `cap` examples (fewer if the profile says so), no deadline: every example
    compiles new XLA programs."""
    return settings(budget(cap), deadline=None)


def widths() -> st.SearchStrategy[tuple[int, int, int]]:
    return st.tuples(*(st.sampled_from(WIDTHS) for _ in range(3)))


@st.composite
def training_setups(draw: st.DrawFn) -> tuple[tuple[int, int], tuple[int, int, int], int]:
    """What every training property draws first: a mesh shape over the slice's devices, an
    MLP's widths and a batch size."""
    shape = draw(mesh_shapes(xr.global_runtime_device_count()))
    return shape, draw(widths()), draw(st.sampled_from(BATCHES))


def launched(mesh_shape: tuple[int, int]) -> SPMDStrategy:
    strategy = SPMDStrategy(mesh_shape=mesh_shape)
    strategy.setup_environment()
    return strategy


def assert_close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(got.detach().cpu(), want.detach().cpu(), **TOLERANCE, msg=what)


# ------------------------------------------------------------------------------ sharded == unsharded


@spmd
def test_a_sharded_training_step_computes_what_the_unsharded_step_computes():
    sharded_step_matches()


@few(15)
@given(data=st.data())
def sharded_step_matches(data):
    shape, sizes, batch = data.draw(training_setups(), label="mesh_shape, widths, batch_size")
    clip = data.draw(st.sampled_from([None, 0.05]), label="gradient_clip_val")
    strategy = launched(shape)
    mesh = strategy.mesh
    device = torch_xla.device()

    torch.manual_seed(1)
    x, y = torch.randn(batch, sizes[0]), torch.randn(batch, sizes[2])
    results = []
    for sharded in (False, True):
        model = mlp(sizes, seed=0).to(device)
        inputs = x.to(device)
        if sharded:
            for name, param in model.named_parameters():
                spec = data.draw(partition_specs(param.dim()), label=f"spec of {name}")
                xs.mark_sharding(param, mesh, spec)
                assert_layout(param, spec, shape, f"parameter {name}")
            xs.mark_sharding(inputs, mesh, data.draw(partition_specs(2), label="input spec"))
        optimizer = model.configure_optimizers()
        output = model(inputs)
        torch.nn.functional.mse_loss(output, y.to(device)).backward()
        grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        strategy.optimizer_step(optimizer, clip)
        torch_xla.sync()
        results.append((output, grads, dict(model.named_parameters())))

    (out, grads, params), (sharded_out, sharded_grads, sharded_params) = results
    assert_close(sharded_out, out, "forward output")
    for name in params:
        assert_close(sharded_grads[name], grads[name], f"gradient of {name}")
        assert_close(sharded_params[name], params[name], f"{name} after the optimizer step")


# ------------------------------------------------------------------------------ FSDPv2 == one device


@spmd
def test_fsdpv2_training_equals_single_device_training():
    fsdpv2_training_matches()


@few(8)
@given(data=st.data())
def fsdpv2_training_matches(data):
    shape, sizes, batch = data.draw(training_setups(), label="mesh_shape, widths, batch_size")
    steps = data.draw(st.integers(1, 3), label="steps")
    clip = data.draw(st.sampled_from([None, 0.05]), label="gradient_clip_val")
    torch.manual_seed(2)
    dataset = TensorDataset(
        torch.randn(batch * steps, sizes[0]), torch.randn(batch * steps, sizes[2])
    )

    def fit(strategy):
        trainer = Trainer(
            strategy=strategy, max_steps=steps, gradient_clip_val=clip, progress=False
        )
        return trainer.fit_here(mlp(sizes, seed=0), DataLoader(dataset, batch, shuffle=True))

    single = fit(SingleDeviceXLAStrategy(torch_xla.device()))
    fsdp = fit(SPMDStrategy(mesh_shape=shape))

    assert [s for s, _ in fsdp.losses] == [s for s, _ in single.losses]
    torch.testing.assert_close(
        [loss for _, loss in fsdp.losses], [loss for _, loss in single.losses], **TOLERANCE
    )
    for name, value in single.state_dict.items():
        assert_close(fsdp.state_dict[name], value, f"{name} after {steps} steps")


@spmd
def test_fsdpv2_shards_every_parameter_and_every_batch_along_fsdp():
    fsdpv2_layout_holds()


@few(8)
@given(data=st.data())
def fsdpv2_layout_holds(data):
    shape, sizes, batch = data.draw(training_setups(), label="mesh_shape, widths, batch_size")
    strategy = launched(shape)
    model = mlp(sizes, seed=0)
    strategy.setup(SimpleNamespace(model=model))
    for name, param in model.named_parameters():
        assert_layout(param, fsdp_spec(param), shape, f"parameter {name}")
    torch.manual_seed(3)
    loader = DataLoader(TensorDataset(torch.randn(batch, sizes[0]), torch.arange(batch)), batch)
    x, index = next(iter(strategy.process_dataloader(loader)))
    assert_layout(x, batch_layout(x), shape, "the batch's inputs")
    assert_layout(index, batch_layout(index), shape, "the batch's 1-D labels")


# ------------------------------------------------------------------------------ checkpoints


def trained(shape: tuple[int, int], sizes, seed: int, steps: int = 1) -> SPMDStrategy:
    """A strategy on a mesh of `shape` with an MLP after `steps` optimizer steps (0: the
    optimizer has no state yet, as when a trainer resumes; 1: momentum exists)."""
    strategy = launched(shape)
    strategy.setup(SimpleNamespace(model=mlp(sizes, seed)))
    torch.manual_seed(seed)
    x = torch.randn(4, sizes[0]).to(torch_xla.device())
    for _ in range(steps):
        strategy.model(x).square().mean().backward()
        strategy.optimizer_step(strategy.optimizers[0])
    torch_xla.sync()
    return strategy


def host_state(strategy: SPMDStrategy) -> dict[str, torch.Tensor]:
    """Parameters and their momentum, on the host. Momentum is looked up by parameter, as the
    optimizer's next step will: state restored under another key would be lost to it."""
    model, optimizer = strategy.model, strategy.optimizers[0]
    state = dict(model.state_dict())
    for name, param in model.named_parameters():
        state[f"momentum of {name}"] = optimizer.state[param]["momentum_buffer"]
    return {k: v.detach().cpu() for k, v in state.items()}


@spmd
def test_a_sharded_checkpoint_restores_on_the_same_mesh_and_on_another():
    checkpoint_restores()


@few(8)
@given(data=st.data())
def checkpoint_restores(data):
    devices = xr.global_runtime_device_count()
    saved_on = data.draw(mesh_shapes(devices), label="saved on mesh")
    loaded_on = data.draw(
        st.sampled_from([saved_on, data.draw(mesh_shapes(devices))]), label="loaded on mesh"
    )
    sizes = data.draw(widths(), label="widths")
    reader_steps = data.draw(st.sampled_from([0, 1]), label="the reader's steps before loading")
    writer = trained(saved_on, sizes, seed=0)
    saved = host_state(writer)
    layouts = {n: sharding_text(p) for n, p in writer.model.named_parameters()}

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "step-1.ckpt"
        checkpoint = {
            "model": writer.model.state_dict(),
            "optimizer": writer.optimizers[0].state_dict(),
            "step": 1,
        }
        writer.save_checkpoint(checkpoint, path)
        reader = trained(loaded_on, sizes, seed=1, steps=reader_steps)  # other weights
        loaded = reader.load_checkpoint(path)
    reader.model.load_state_dict(loaded["model"])
    reader.optimizers[0].load_state_dict(loaded["optimizer"])

    assert loaded["step"] == 1
    restored = host_state(reader)
    assert restored.keys() == saved.keys()
    for name, value in saved.items():
        assert torch.equal(restored[name], value), f"{name} restored on mesh {loaded_on}"
    for name, param in reader.model.named_parameters():
        assert_layout(param, fsdp_spec(param), loaded_on, f"restored {name}")
        momentum = reader.optimizers[0].state[param]["momentum_buffer"]  # sharded like its param
        assert_layout(momentum, fsdp_spec(param), loaded_on, f"restored momentum of {name}")
        if loaded_on == saved_on:
            assert sharding_text(param) == layouts[name], f"{name}'s sharding changed"


# ------------------------------------------------------------------------------ round trips


@spmd
def test_a_sharding_spec_round_trips_through_its_xla_form_and_its_shards():
    sharding_round_trips()


@few(20)
@given(data=st.data())
def sharding_round_trips(data):
    devices = xr.global_runtime_device_count()
    shape = data.draw(mesh_shapes(devices), label="mesh_shape")
    dims = data.draw(st.lists(st.sampled_from(WIDTHS), min_size=1, max_size=3), label="shape")
    spec = data.draw(partition_specs(len(dims)), label="spec")
    mesh = make_mesh(shape)
    full = torch.arange(float(torch.tensor(dims).prod())).reshape(dims)

    tensor = full.to(torch_xla.device())
    xs.mark_sharding(tensor, mesh, spec)
    assert_layout(tensor, spec, shape, "the marked tensor")

    again = full.to(torch_xla.device())  # the same sharding, from its XLA form
    torch_xla._XLAC._xla_mark_sharding(again, torch_xla._XLAC._get_xla_op_sharding(tensor))
    assert sharding_text(again) == sharding_text(tensor)
    assert_layout(again, spec, shape, "the tensor re-marked from the XLA form")

    shards = xs.XLAShardedTensor(tensor).local_shards  # and back from its shards
    rebuilt = torch.empty_like(full)
    for shard in shards:
        rebuilt[shard.indices] = shard.data.cpu()
    assert torch.equal(rebuilt, full)
