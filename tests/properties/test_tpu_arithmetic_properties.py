"""The TPU's matmul arithmetic, from its definition: for drawn shapes, dtypes, operations
(matmul, batched matmul, linear with bias, convolution, torch_xla's `_xla_dot_general`; forward
and the input gradient) and
torch_xla's three precisions, what the XLA device computes equals what the test computes here.

The definition, as XLA writes the algorithms the TPU runs (`BF16_BF16_F32`, `_X3`, `_X6`;
docs/tpu-arithmetic.md): an f32 operand is split into bf16 parts (one: rounded to nearest even;
two or three: every part but the last truncated, the last the rest rounded), each pass multiplies
a pair of parts with f32 accumulation, and the passes are added in a fixed order, the product of
the leading parts last. bf16 operands are multiplied as they are, accumulated in f32 and the sum
rounded to bf16. The split is computed here with bit operations in NumPy; the products of bf16
values are exact in float32 and float64.

Where the definition fixes the bits, the property asserts equality bit for bit:
- a contraction of length 1 (an outer product, a 1x1 convolution of one channel): every pass is
  one exact product, and the passes' order is the definition's;
- at 'default', operands of magnitude in [1, 2) and contractions of at most 8: every partial
  sum is a multiple of 2^-14 below 2^5, exact in f32, so the accumulation order cannot matter.
Elsewhere the order in which the MXU (or the CPU standing in for it) accumulates a pass is
free, and each result may differ from the exact sum of the definition's products by the f32
accumulation bound: gamma(n) * sum |products| with gamma(n) = n u / (1 - n u), u = 2^-24, n the
contraction length plus the passes added (Higham, Accuracy and Stability, 3.1); bf16 outputs
may then round to a neighbour of the exactly rounded value.

On a TPU VM (native backend) the property holds as it is: it is the TPU's arithmetic. A CPU
device natively computes exact f32 (skipped), as does emulation with XLASIM_ARITHMETIC=exact.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torch_xla
import torch_xla.backends
import torch_xla.core.xla_model as xm
from drawing import budget
from hypothesis import event, given
from hypothesis import strategies as st

#: Each precision: bf16 parts per operand, and the products of parts (lhs, rhs) added in order,
#: the last one (the leading parts) after the others.
DEFINITION = {
    "default": (1, [(0, 0)]),
    "high": (2, [(1, 0), (0, 1), (0, 0)]),
    "highest": (3, [(1, 1), (0, 2), (2, 0), (0, 1), (1, 0), (0, 0)]),
}
UNIT_ROUNDOFF = 2.0**-24
OPERATIONS = ("matmul", "bmm", "linear", "conv2d", "matmul_input_grad", "dot_general")
#: Operations torch_xla lowers at DEFAULT whatever the setting (docs/tpu-arithmetic.md).
AT_DEFAULT = frozenset({"dot_general"})


def truncate(x: np.ndarray) -> np.ndarray:
    """f32 values with their 16 low bits cleared: bf16 by truncation."""
    return (x.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)


def round_to_bf16(x: np.ndarray) -> np.ndarray:
    """f32 values rounded to the nearest bf16, ties to even (finite values)."""
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


def split(x: np.ndarray, count: int) -> list[np.ndarray]:
    parts, rest = [], x
    for _ in range(count - 1):
        leading = truncate(rest)
        parts.append(leading)
        rest = rest - leading  # exact in f32
    parts.append(round_to_bf16(rest))
    return parts


@dataclass(frozen=True)
class Case:
    operation: str
    precision: str
    dtype: torch.dtype
    lhs: np.ndarray  # float32 values (bf16-representable when dtype is bfloat16)
    rhs: np.ndarray
    bias: np.ndarray | None
    contraction: int
    #: Operands from [1, 2), so that at 'default' every partial sum is exact.
    exact_sums: bool

    def tensors(self) -> list[torch.Tensor]:
        found = [torch.from_numpy(self.lhs), torch.from_numpy(self.rhs)]
        if self.bias is not None:
            found.append(torch.from_numpy(self.bias))
        return [t.to(self.dtype) for t in found]


def product(operation: str, lhs: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """The bilinear product each operation is, on any device and dtype (no bias)."""
    if operation == "conv2d":
        return F.conv2d(lhs, rhs)
    if operation == "linear":
        return F.linear(lhs, rhs)
    return torch.matmul(lhs, rhs)


def set_precision(setting: str) -> None:
    """torch_xla's setting, without its warning about setting it more than once (we mean to)."""
    logger = logging.getLogger(torch_xla.backends.__name__)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        torch_xla.backends.set_mat_mul_precision(setting)
    finally:
        logger.setLevel(level)


def on_rank(case: Case, setting: str) -> torch.Tensor:
    """What this rank's XLA device computes for the case at torch_xla's `setting`."""
    set_precision(setting)
    device = torch_xla.device()
    tensors = [t.to(device) for t in case.tensors()]
    if case.operation == "matmul_input_grad":
        grad_output, rhs = tensors  # the gradient of a @ rhs with respect to a: g @ rhs^T
        lhs = torch.zeros(grad_output.shape[0], rhs.shape[0], device=device, dtype=case.dtype)
        lhs.requires_grad_()
        (lhs @ rhs).backward(grad_output)
        result = lhs.grad
    elif case.operation == "linear":
        result = F.linear(*tensors)
    elif case.operation == "dot_general":  # XLA's DotGeneral contracting lhs 1 with rhs 0
        result = torch_xla._XLAC._xla_dot_general(*tensors, (([1], [0]), ()))
    else:
        result = product(case.operation, *tensors)
    set_precision("default")
    return result.cpu()


def reference_operands(case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    """The two operands of the definition's product (the input gradient's are g and rhs^T)."""
    lhs, rhs = torch.from_numpy(case.lhs), torch.from_numpy(case.rhs)
    if case.operation == "matmul_input_grad":
        return lhs, rhs.t().contiguous()
    return lhs, rhs


def passes(case: Case) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each pass's (exact sum in float64, sum of magnitudes), in the definition's order."""
    lhs, rhs = reference_operands(case)
    operation = (
        "matmul" if case.operation in ("matmul_input_grad", "dot_general") else case.operation
    )
    if case.dtype == torch.bfloat16:
        pairs = [(lhs, rhs)]
    else:
        count, order = DEFINITION[effective_precision(case)]
        lhs_parts = [torch.from_numpy(p) for p in split(lhs.numpy(), count)]
        rhs_parts = [torch.from_numpy(p) for p in split(rhs.numpy(), count)]
        pairs = [(lhs_parts[i], rhs_parts[j]) for i, j in order]
    return [
        (
            product(operation, a.double(), b.double()),
            product(operation, a.double().abs(), b.double().abs()),
        )
        for a, b in pairs
    ]


def effective_precision(case: Case) -> str:
    """The precision the case's operation computes at: the setting's, or DEFAULT for the ones
    torch_xla lowers at DEFAULT."""
    return "default" if case.operation in AT_DEFAULT else case.precision


def bit_exact_reference(case: Case) -> torch.Tensor:
    """The definition's bits, where every pass is one exact product or exact sums: the passes
    added in float32 in its order (a NaN in the minor passes' sum counts as 0), then the bias."""
    sums = [value.float() for value, _ in passes(case)]
    *minor, leading = sums
    total = leading
    if minor:
        low = minor[0]
        for term in minor[1:]:
            low = low + term
        total = torch.where(low.abs() <= float("inf"), low, 0.0) + leading
    if case.bias is not None:
        total = total + torch.from_numpy(case.bias)
    return total.to(case.dtype)


def accumulation_bound(case: Case) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The exact value of the definition (float64), how far f32 accumulation may move it, and
    the sum of the magnitudes of its terms."""
    found = passes(case)
    exact = sum(value for value, _ in found)
    magnitude = sum(size for _, size in found)
    if case.bias is not None:
        exact = exact + torch.from_numpy(case.bias).double()
        magnitude = magnitude + torch.from_numpy(case.bias).double().abs()
    steps = case.contraction + len(found) + 1
    gamma = steps * UNIT_ROUNDOFF / (1 - steps * UNIT_ROUNDOFF)
    # float64 sums of the reference: far below, counted anyway
    return exact, (gamma + steps * 2.0**-53) * magnitude, magnitude


# ------------------------------------------------------------------------------ drawing


def f32_values(count: int, exact_sums: bool) -> st.SearchStrategy[np.ndarray]:
    """Normal f32 values with all 24 bits drawn (so every split has work to do): magnitudes in
    [1, 2) for exact sums, else across 2^-8..2^8; signs either way."""
    low, high = (0, 0) if exact_sums else (-8, 7)
    value = st.tuples(st.integers(0, 2**23 - 1), st.integers(low, high), st.booleans()).map(
        lambda v: (-1) ** v[2] * (1 + v[0] / 2**23) * 2.0 ** v[1]
    )
    return st.lists(value, min_size=count, max_size=count).map(
        lambda vs: np.array(vs, dtype=np.float32)
    )


@st.composite
def cases(draw) -> Case:
    operation = draw(st.sampled_from(OPERATIONS), label="operation")
    dtype = draw(st.sampled_from((torch.float32, torch.bfloat16)), label="dtype")
    precision = draw(st.sampled_from(tuple(DEFINITION)), label="precision")
    contraction = draw(st.sampled_from((1, 2, 5, 8, 16)), label="contraction")
    rows, columns = draw(st.integers(1, 4), label="rows"), draw(st.integers(1, 4), label="cols")
    exact_sums = draw(st.booleans(), label="exact_sums") and contraction <= 8
    if operation == "conv2d":  # a 3x3 kernel over `contraction // 9 + 1` channels, or 1x1
        channels, kernel = (contraction, 1) if contraction < 9 else (contraction // 9, 3)
        contraction = channels * kernel * kernel
        lhs_shape = (1, channels, kernel + rows - 1, kernel + columns - 1)
        rhs_shape = (draw(st.integers(1, 3), label="out_channels"), channels, kernel, kernel)
    elif operation == "bmm":
        batch = draw(st.integers(1, 3), label="batch")
        lhs_shape, rhs_shape = (batch, rows, contraction), (batch, contraction, columns)
    elif operation == "linear":
        lhs_shape, rhs_shape = (rows, contraction), (columns, contraction)
    elif operation == "matmul_input_grad":  # g [rows, columns], rhs [contraction, columns]
        lhs_shape, rhs_shape = (rows, columns), (contraction, columns)
        contraction = columns
    else:
        lhs_shape, rhs_shape = (rows, contraction), (contraction, columns)
    exact_sums = exact_sums and contraction <= 8

    def operand(shape: tuple[int, ...], label: str) -> np.ndarray:
        values = draw(f32_values(int(np.prod(shape)), exact_sums), label=label).reshape(shape)
        if dtype == torch.bfloat16:
            values = round_to_bf16(values)
        return values

    lhs, rhs = operand(lhs_shape, "lhs"), operand(rhs_shape, "rhs")
    bias = operand((columns,), "bias") if operation == "linear" else None
    return Case(operation, precision, dtype, lhs, rhs, bias, contraction, exact_sums)


# ------------------------------------------------------------------------------ the property


def hardware() -> str:
    """The rank's device hardware: TPU on a TPU and on emulated cores, CPU natively on a CPU."""
    return xm.xla_device_hw(torch_xla.device())


@pytest.fixture(scope="module")
def tpu_arithmetic(xla_world, world_sizes, emulated) -> None:
    """Skip where the device computes exact f32: a CPU device natively, or the opt-out. Asked on
    a rank: natively the pytest process must not touch the device (the workers hold it)."""
    if emulated and os.environ.get("XLASIM_ARITHMETIC") == "exact":
        pytest.skip("XLASIM_ARITHMETIC=exact: this session computes exact f32, not as a TPU")
    if not emulated and xla_world.run_on(world_sizes[0], hardware)[0] != "TPU":
        pytest.skip("natively on a CPU device: exact f32 arithmetic, not a TPU's")


@budget(60)
@given(case=cases())
def test_matmul_and_convolution_compute_the_tpus_arithmetic(
    tpu_arithmetic, xla_world, world_sizes, case
):
    results = xla_world.run_on(world_sizes[0], on_rank, case, case.precision)
    one_rounding = effective_precision(case) == "default" or case.dtype == torch.bfloat16
    bits_fixed = case.contraction == 1 or (case.exact_sums and one_rounding)
    if case.dtype == torch.bfloat16 and case.bias is not None:
        bits_fixed = False  # the bias may be added before or after the dot's rounding to bf16
    event("bit for bit" if bits_fixed else "within the accumulation bound")
    exact, bound, magnitude = accumulation_bound(case)
    expected = bit_exact_reference(case)
    for rank, got in enumerate(results):
        assert got.dtype == case.dtype and got.shape == exact.shape, (rank, got)
        if bits_fixed:
            assert torch.equal(got, expected), f"rank {rank}: {got} != {expected} bit for bit"
            continue
        allowed = bound
        if case.dtype == torch.bfloat16:  # rounded to bf16 once or twice (the bias after the
            allowed = bound + magnitude * 2.0**-7  # dot's rounding or before): 2^-8 each
        error = (got.double() - exact).abs()
        assert (error <= allowed).all(), (
            f"rank {rank}: {error.max().item():.3g} from the definition's exact value, "
            f"allowed {allowed.flatten()[error.argmax()].item():.3g}"
        )
