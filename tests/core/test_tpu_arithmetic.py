"""f32 matmuls and convolutions compute as the TPU's MXU does (xlasim/tpu/arithmetic.py).

Every way torch code reaches a dot or a convolution on an XLA tensor, forward and backward, is
checked against its definition at torch_xla's default precision: the operands (and, backward,
the incoming gradient) rounded to bf16, products accumulated in f32. The reference is the same
op on the CPU in float64 over the rounded values; the two may differ only by f32 accumulation
(`ACCUMULATION`, relative to the sum of the products' magnitudes), and each check also asserts
the result is far from exact f32, so a route that escapes the rounding fails. The passes of
'high' and 'highest' are checked bit for bit by tests/properties/test_tpu_arithmetic_properties.py.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial

import pytest
import torch
import torch.nn.functional as F
import torch_xla
import torch_xla.backends
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

import xlasim
from xlasim.tpu.arithmetic import PrecisionChangeWarning
from xlasim.tpu.arithmetic_choice import ARITHMETIC_ENV

#: f32 accumulation of up to ~64 products: |error| <= 64 * 2^-24 * sum |products| < 4e-6 of it.
ACCUMULATION = 4e-6
#: bf16 rounding moves a product by up to ~2^-8 of its size: exact f32 is farther than this.
ROUNDING_SEEN = 1e-4


def bf16(t: torch.Tensor) -> torch.Tensor:
    """The values the MXU reads, in float64 for the reference."""
    return t.to(torch.bfloat16).to(torch.float64)


@pytest.fixture
def precision() -> Iterator[Callable[[str], None]]:
    """Set torch_xla's precision for one test; 'default' (the TPU's) again afterwards."""
    yield torch_xla.backends.set_mat_mul_precision
    torch_xla.backends.set_mat_mul_precision("default")


# ------------------------------------------------------------------------------ every route


@dataclass(frozen=True)
class Route:
    """A way to a dot or a convolution: the function of its operands and their shapes, which
    operands are biases (added in f32, not multiplied) and which gradients no MXU computes (a
    bias's is the incoming gradient's sum; `dot`'s and `mv`'s matrix gradient an elementwise
    outer product in autograd's formula): those are exact f32 on a TPU too."""

    name: str
    fn: Callable[..., torch.Tensor]
    shapes: tuple[tuple[int, ...], ...]
    biases: frozenset[int] = frozenset()
    elementwise_grads: frozenset[int] = frozenset()

    def exact_grads(self) -> frozenset[int]:
        return self.biases | self.elementwise_grads


ROUTES = [
    Route("mm", torch.mm, ((6, 16), (16, 5))),
    Route("matmul 3d @ 2d", torch.matmul, ((2, 6, 16), (16, 5))),
    Route("bmm", torch.bmm, ((3, 6, 16), (3, 16, 5))),
    Route("dot", torch.dot, ((32,), (32,)), elementwise_grads=frozenset({0, 1})),
    Route("mv", torch.mv, ((6, 32), (32,)), elementwise_grads=frozenset({0})),
    Route("linear with bias", F.linear, ((6, 16), (5, 16), (5,)), biases=frozenset({2})),
    Route("addmm", torch.addmm, ((6, 5), (6, 16), (16, 5)), biases=frozenset({0})),
    Route("baddbmm", torch.baddbmm, ((3, 6, 5), (3, 6, 16), (3, 16, 5)), biases=frozenset({0})),
    Route("einsum", partial(torch.einsum, "bik,bjk->bij"), ((2, 6, 16), (2, 5, 16))),
    Route("conv1d", partial(F.conv1d, padding=1), ((2, 4, 9), (5, 4, 3), (5,)), frozenset({2})),
    Route(
        "conv2d strided",
        partial(F.conv2d, stride=2, padding=1),
        ((2, 3, 8, 8), (4, 3, 3, 3), (4,)),
        frozenset({2}),
    ),
    Route("conv_transpose2d", partial(F.conv_transpose2d, stride=2), ((2, 4, 5, 5), (4, 3, 3, 3))),
]


def with_magnitudes(fn, operands, grad_output):
    """Output and gradients of `fn` in float64 over `operands` (leaves), and the same over their
    absolute values: the sums of the products' magnitudes the accumulation bound scales with."""
    out = fn(*operands)
    grads = torch.autograd.grad(out, operands, grad_output)
    absolute = [t.detach().abs().requires_grad_() for t in operands]
    out_abs = fn(*absolute)
    grads_abs = torch.autograd.grad(out_abs, absolute, grad_output.abs())
    return [out.detach(), *grads], [out_abs.detach(), *grads_abs]


def reference(route: Route, operands, grad_output):
    """The TPU's default arithmetic in float64: the output and gradients of the MXU's dots over
    the rounded operands and rounded incoming gradient; the exact ones where no MXU computes."""
    leaves = [
        (t.double() if i in route.biases else bf16(t)).requires_grad_()
        for i, t in enumerate(operands)
    ]
    values, magnitudes = with_magnitudes(route.fn, leaves, bf16(grad_output))
    plain, plain_magnitudes = exact(route, operands, grad_output)
    for i in route.exact_grads():
        values[1 + i], magnitudes[1 + i] = plain[1 + i], plain_magnitudes[1 + i]
    return values, magnitudes


def on_rank(fn, operands, grad_output):
    """Output and gradients computed on the rank's XLA device."""
    device = torch_xla.device()
    leaves = [t.to(device).requires_grad_() for t in operands]
    out = fn(*leaves)
    out.backward(grad_output.to(device))
    return [out.detach().cpu(), *(t.grad.cpu() for t in leaves)]


def exact(route: Route, operands, grad_output):
    """What exact arithmetic gives (float64), and its magnitudes."""
    leaves = [t.double().requires_grad_() for t in operands]
    return with_magnitudes(route.fn, leaves, grad_output.double())


@pytest.mark.parametrize("route", ROUTES, ids=[r.name for r in ROUTES])
def test_every_route_to_a_dot_or_convolution_computes_as_the_mxu(world, route):
    generator = torch.Generator().manual_seed(len(route.name))
    operands = [torch.randn(shape, generator=generator) for shape in route.shapes]
    with torch.no_grad():
        grad_output = torch.randn(route.fn(*operands).shape, generator=generator)
    [actual] = world.run(lambda rank: on_rank(route.fn, operands, grad_output), size=1)
    expected, magnitudes = reference(route, operands, grad_output)
    plain, _ = exact(route, operands, grad_output)
    names = ["output"] + [f"grad {i}" for i in range(len(operands))]
    for index, (what, got, want, size, f32) in enumerate(
        zip(names, actual, expected, magnitudes, plain, strict=True)
    ):
        bound = ACCUMULATION * size.max().item()
        error = (got.double() - want).abs().max().item()
        assert error <= bound, (
            f"{route.name} {what}: {error:.3g} from the TPU's (bound {bound:.3g})"
        )
        if index - 1 not in route.exact_grads():
            distance = (got.double() - f32).abs().max().item()
            assert distance > ROUNDING_SEEN * size.max().item(), f"{route.name} {what}: exact f32"


def dot_general_and_addmv(rank, setting: str) -> dict:
    """XLA's DotGeneral (a batched product through `_xla_dot_general`) at `setting`, and addmv
    with the fallback counter's growth around it."""
    torch_xla.backends.set_mat_mul_precision(setting)
    generator = torch.Generator().manual_seed(11)
    a, b = torch.randn(2, 6, 16, generator=generator), torch.randn(2, 16, 5, generator=generator)
    bias, matrix, vector = (torch.randn(s, generator=generator) for s in ((6,), (6, 16), (16,)))
    device = torch_xla.device()
    general = torch_xla._XLAC._xla_dot_general(a.to(device), b.to(device), (([2], [1]), ([0], [0])))
    before = met.counter_value("aten::addmv") or 0
    added = torch.addmv(bias.to(device), matrix.to(device), vector.to(device))
    torch_xla.sync()
    return {
        "operands": (a, b, bias, matrix, vector),
        "dot_general": general.cpu(),
        "addmv": added.cpu(),
        "addmv_fallbacks": (met.counter_value("aten::addmv") or 0) - before,
    }


def test_dot_general_computes_at_default_whatever_the_setting(world, precision):
    """torch_xla builds `_xla_dot_general` with no precision config: DEFAULT, one bf16 pass,
    even at 'highest'."""
    [found] = world.run(lambda rank: dot_general_and_addmv(rank, "highest"), size=1)
    a, b = found["operands"][:2]
    rounded = bf16(a) @ bf16(b)
    size = (a.double().abs() @ b.double().abs()).max().item()
    got = found["dot_general"].double()
    assert (got - rounded).abs().max().item() <= ACCUMULATION * size
    assert (got - a.double() @ b.double()).abs().max().item() > ROUNDING_SEEN * size


def test_addmv_falls_back_to_the_host_in_exact_f32_as_on_a_tpu(world):
    """torch_xla 2.9 lowers no addmv: it runs through aten's CPU fallback on any device (a TPU
    VM's host CPU too), so a TPU computes it in exact f32, not on the MXU."""
    [found] = world.run(lambda rank: dot_general_and_addmv(rank, "default"), size=1)
    bias, matrix, vector = found["operands"][2:]
    assert found["addmv_fallbacks"] == 1
    assert torch.equal(found["addmv"], torch.addmv(bias, matrix, vector))


def attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def attention_by_hand(q, k, v):
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    return torch.softmax(scores, dim=-1) @ v


def test_attention_computes_with_the_rounded_matmuls(world):
    """F.scaled_dot_product_attention on XLA is its math path: the same two rounded dots."""
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 8, 16, generator=generator) for _ in range(3))

    def both(rank):
        device = torch_xla.device()
        args = [t.to(device) for t in (q, k, v)]
        return attention(*args).cpu(), attention_by_hand(*args).cpu()

    [(fused, by_hand)] = world.run(both, size=1)
    torch.testing.assert_close(fused, by_hand, rtol=0, atol=1e-5)
    assert (fused.double() - attention(q.double(), k.double(), v.double())).abs().max() > 1e-3


# ------------------------------------------------------------------------------ precisions


def dots_and_convolutions(rank, setting: str):
    """A matmul's and a convolution's outputs and gradients at `setting`, and an einsum's and a
    transposed convolution's outputs."""
    torch_xla.backends.set_mat_mul_precision(setting)
    generator = torch.Generator().manual_seed(1)
    a, b = torch.randn(8, 64, generator=generator), torch.randn(64, 8, generator=generator)
    x, w = (
        torch.randn(2, 3, 8, 8, generator=generator),
        torch.randn(4, 3, 3, 3, generator=generator),
    )
    device = torch_xla.device()
    results = {}
    for name, fn, operands in (("mm", torch.mm, (a, b)), ("conv", F.conv2d, (x, w))):
        leaves = [t.to(device).requires_grad_() for t in operands]
        out = fn(*leaves)
        out.backward(torch.ones_like(out))
        results[name] = out.detach().cpu()
        results[f"{name} grads"] = [t.grad.cpu() for t in leaves]
    results["einsum"] = torch.einsum("ik,kj->ij", a.to(device), b.to(device)).cpu()
    # an index in one term only: torch_xla leaves it to at::native::einsum, hence bmm
    results["einsum decomposed"] = torch.einsum("ik,kj->i", a.to(device), b.to(device)).cpu()
    results["conv_transpose"] = F.conv_transpose2d(x.to(device), w.transpose(0, 1).to(device)).cpu()
    return results


def test_each_precision_takes_its_passes_where_torch_xla_lowers_it(world, precision):
    """'high' and 'highest' sharpen what torch_xla 2.9 lowers with the setting (dots, the
    forward convolution, an einsum it decomposes into them); its own einsum, transposed convolution and convolution gradients are
    lowered with DEFAULT whatever the setting, so they keep the one-pass bits."""
    by_setting = {
        setting: world.run(dots_and_convolutions, (setting,), size=1)[0]
        for setting in ("default", "high", "highest")
    }
    generator = torch.Generator().manual_seed(1)
    a, b = torch.randn(8, 64, generator=generator), torch.randn(64, 8, generator=generator)
    truth = a.double() @ b.double()
    errors = [(by_setting[s]["mm"].double() - truth).abs().max().item() for s in by_setting]
    assert errors[0] > 30 * errors[1] > 30 * 30 * errors[2], errors  # ~8, ~16, ~24 bits
    default, highest = by_setting["default"], by_setting["highest"]
    assert not torch.equal(default["conv"], highest["conv"])
    assert not torch.equal(default["einsum decomposed"], highest["einsum decomposed"])
    assert not any(torch.equal(d, h) for d, h in zip(default["mm grads"], highest["mm grads"]))
    for fixed in ("einsum", "conv_transpose"):
        assert torch.equal(default[fixed], highest[fixed]), fixed
    for d, h in zip(default["conv grads"], highest["conv grads"], strict=True):
        assert torch.equal(d, h)


def test_the_setting_reads_back_as_set(world, precision):
    def set_and_get(rank):
        torch_xla.backends.set_mat_mul_precision("high")
        return torch_xla.backends.get_mat_mul_precision()

    assert world.run(set_and_get, size=1) == ["high"]


def _operands() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(5)
    return torch.randn(8, 64, generator=generator), torch.randn(64, 8, generator=generator)


def products_around_a_change(rank, first: str, then: str) -> dict:
    """`a @ b` traced at `first`; then, at `then`, the same structure again (new tensors, same
    graph) and another structure (`(a * 1.5) @ b`), with the warnings of each."""
    a, b = _operands()
    device = torch_xla.device()
    results = {}
    for name, setting, lhs in (
        ("first", first, lambda: a.to(device)),
        ("same structure", then, lambda: a.to(device)),
        ("other structure", then, lambda: a.to(device) * 1.5),
    ):
        torch_xla.backends.set_mat_mul_precision(setting)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            product = (lhs() @ b.to(device)).cpu()
        warned = [str(w.message) for w in seen if w.category is PrecisionChangeWarning]
        results[name] = (product, warned)
    return results


def test_a_graph_compiled_before_a_precision_change_keeps_its_precision(world, precision):
    """As on a TPU, where torch_xla's compilation cache does not key on the precision: a dot of
    a structure compiled at 'highest' computes at 'highest' after the setting went 'default'
    (warned about), another structure takes 'default', and a new launch (new TPU processes)
    starts with nothing compiled."""
    [changed] = world.run(products_around_a_change, ("highest", "default"), size=1)
    [fresh] = world.run(products_around_a_change, ("default", "default"), size=1)
    [highest_first] = world.run(products_around_a_change, ("highest", "highest"), size=1)
    highest, _ = highest_first["first"]
    default, _ = fresh["first"]
    assert not torch.equal(highest, default)
    again, warned = changed["same structure"]
    assert torch.equal(again, highest)
    assert len(warned) == 1
    assert "this mm computes at 'highest', not at torch_xla's setting 'default'" in warned[0]
    other, warned = changed["other structure"]
    assert torch.equal(other, fresh["other structure"][0])
    assert warned == []
    assert torch.equal(changed["first"][0], highest)


# ------------------------------------------------------------------------------ in the graph


def training_steps(rank, steps: int = 3):
    """A small model's training steps; the XLA counters of the last one. Each step ends with
    `wait_device_ops`: torch_xla records an execution's ExecuteTime in its execution thread, which
    `sync(wait=True)` can return before, so a loaded machine counted it in the wrong step."""
    torch.manual_seed(0)
    device = torch_xla.device()
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(64, 2)
    )
    model = model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(4, 3, 6, 6).to(device), torch.randn(4, 2).to(device)
    torch_xla.sync()
    for _ in range(steps):
        met.clear_all()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        before_sync = met.metric_data("TransferFromDeviceTime")
        torch_xla.sync(wait=True)
        xm.wait_device_ops()
    return {
        "compiles": (met.metric_data("CompileTime") or (0,))[0],
        "executions": (met.metric_data("ExecuteTime") or (0,))[0],
        "transfers before the sync": before_sync,
        "fallbacks": [name for name in met.counter_names() if name.startswith("aten::")],
    }


def test_a_training_step_stays_one_graph_on_the_device(world, monkeypatch):
    """No graph cut, no host round trip, no CPU fallback: a warm step runs as many executions as
    with the CPU's exact arithmetic, and compiles nothing."""
    tpu_counts = world.run(training_steps, size=1)
    monkeypatch.setenv(ARITHMETIC_ENV, "exact")
    exact_counts = world.run(training_steps, size=1)
    assert tpu_counts == exact_counts
    assert tpu_counts[0]["compiles"] == 0
    assert tpu_counts[0]["transfers before the sync"] is None
    assert tpu_counts[0]["fallbacks"] == []


def compiled_linear(rank):
    """A linear layer's output and gradient through torch.compile's openxla backend."""
    generator = torch.Generator().manual_seed(2)
    x, w = torch.randn(6, 32, generator=generator), torch.randn(4, 32, generator=generator)
    device = torch_xla.device()
    step = torch.compile(lambda x, w: F.linear(x, w).square().sum(), backend="openxla")
    wd = w.to(device).requires_grad_()
    step(x.to(device), wd).backward()
    return x, w, wd.grad.cpu()


def test_a_compiled_program_computes_as_the_mxu(world):
    [(x, w, grad)] = world.run(compiled_linear, size=1)
    y = bf16(x) @ bf16(w).t()  # forward, rounded
    y32 = y.float()  # the f32 output the backward's dot reads, rounded again
    expected = bf16(2 * y32).t() @ bf16(x)
    assert (grad.double() - expected).abs().max() <= ACCUMULATION * (expected.abs().max() + 1)
    assert (grad.double() - 2 * (x.double() @ w.double().t()).t() @ x.double()).abs().max() > 1e-3


# ------------------------------------------------------------------------------ opting out


def product(rank, a, b):
    return (a.to(torch_xla.device()) @ b.to(torch_xla.device())).cpu()


@pytest.fixture
def exact_arithmetic(monkeypatch) -> None:
    monkeypatch.setenv(ARITHMETIC_ENV, "exact")


def assert_exact(results, a, b):
    truth = a.double() @ b.double()
    for got in results:
        assert (got.double() - truth).abs().max() < 1e-5


def test_exact_arithmetic_is_the_cpus(world, exact_arithmetic):
    a, b = torch.randn(8, 32), torch.randn(32, 8)
    assert_exact(world.run(product, (a, b), size=2), a, b)


def test_worker_processes_compute_as_the_mxu_and_follow_the_opt_out(monkeypatch):
    """Isolated ranks (a process each) have the kernels too, and read the switch from the job's
    environment."""
    session = xlasim.world()
    if session.topology.threaded:
        pytest.skip(f"this session's ranks are threads ({session.topology.describe()})")
    a, b, size = torch.randn(8, 32), torch.randn(32, 8), min(2, session.size)
    for got in session.run(product, (a, b), size=size):
        assert (got.double() - bf16(a) @ bf16(b)).abs().max() < 1e-5
    monkeypatch.setenv(ARITHMETIC_ENV, "exact")
    assert_exact(session.run(product, (a, b), size=size), a, b)


def test_an_unknown_arithmetic_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"arithmetic='bf16': the arithmetic is 'tpu'"):
        xlasim.emulate(arithmetic="bf16")


# ------------------------------------------------------------------------------ SPMD

SPMD_SCRIPT = """
import numpy as np
import torch
import torch_xla
import torch_xla.backends
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr

xr.use_spmd()
mesh = xs.Mesh(np.arange(xr.global_runtime_device_count()), (2, 1))
generator = torch.Generator().manual_seed(3)
# A contraction of its own for each precision: a TPU runs a graph compiled before the setting
# changed at its old precision (docs/tpu-arithmetic.md), and so does the emulated one.
for setting, inner in (("default", 64), ("high", 72), ("highest", 80)):
    a, b = torch.randn(8, inner, generator=generator), torch.randn(inner, 8, generator=generator)
    truth = a.double() @ b.double()
    torch_xla.backends.set_mat_mul_precision(setting)
    x, w = a.to(torch_xla.device()), b.to(torch_xla.device())
    xs.mark_sharding(x, mesh, (None, 0))  # the contraction is sharded: partial sums all-reduced
    xs.mark_sharding(w, mesh, (0, None))
    print(setting, (torch.mm(x, w).cpu().double() - truth).abs().max().item())
"""


def test_an_spmd_program_computes_as_the_mxu(tmp_path):
    script = tmp_path / "spmd_precision.py"
    script.write_text(SPMD_SCRIPT)
    done = subprocess.run(
        [sys.executable, "-m", "xlasim", "run", "--devices", "2", "--processes", "1", str(script)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    errors = dict(line.split() for line in done.stdout.splitlines())
    default, high, highest = (float(errors[s]) for s in ("default", "high", "highest"))
    assert default > 30 * high > 30 * 30 * highest, errors  # ~8, ~16, ~24 bits


@pytest.mark.xla(spmd=True, min_devices=2)
def test_the_plugins_spmd_world_computes_as_the_mxu():
    """The plugin's SPMD worker (a process of its own, `start_world`) has the kernels too."""
    import numpy as np
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr

    devices = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(devices), (devices, 1))
    generator = torch.Generator().manual_seed(4)
    a, b = torch.randn(8, 64, generator=generator), torch.randn(64, 8, generator=generator)
    x, w = a.to(torch_xla.device()), b.to(torch_xla.device())
    xs.mark_sharding(x, mesh, (None, 0))  # the contraction sharded over every device
    xs.mark_sharding(w, mesh, (0, None))
    got = torch.mm(x, w).cpu().double()
    magnitude = (bf16(a).abs() @ bf16(b).abs()).max().item()
    assert (got - bf16(a) @ bf16(b)).abs().max() <= ACCUMULATION * magnitude
    assert (got - a.double() @ b.double()).abs().max() > ROUNDING_SEEN * magnitude
