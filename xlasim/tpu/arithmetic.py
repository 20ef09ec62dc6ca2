"""The TPU's matmul and convolution arithmetic on the XLA CPU device.

A TPU's matrix unit multiplies bfloat16 operands and accumulates in float32. torch_xla lowers an
f32 dot or convolution with the precision `torch_xla.backends.set_mat_mul_precision` sets
('default': operands rounded to bf16, one pass; 'high': each operand split into two bf16 parts,
three passes; 'highest': three parts, six passes), and the TPU computes it so; the XLA CPU
compiler ignores that precision and multiplies in f32. Here the original XLA kernels of the ops
that lower to a dot or a convolution are replaced by ones that split the operands into bf16
parts inside the graph (lazy tensor ops, no graph cut) and call the original kernel on them, once
per pass. Below autograd, so backward passes are covered too; docs/tpu-arithmetic.md says why
here and which op gets which precision (torch_xla 2.9 does not give all of them the setting).

`XLASIM_ARITHMETIC=exact` (or `emulate(arithmetic="exact")`, `pytest --xla-arithmetic=exact`)
turns it off: the CPU's exact f32, read at each call.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from . import compiled_precision
from .arithmetic_choice import emulating

#: Each precision's passes, as XLA defines the algorithms the TPU runs for them
#: (`BF16_BF16_F32`, `..._X3`, `..._X6`; docs/tpu-arithmetic.md): how many bf16 parts each
#: operand is split into, and the products of parts (lhs part, rhs part) in the order they are
#: added; the last one, the product of the leading parts, is added after the others.
PASSES: dict[str, tuple[int, tuple[tuple[int, int], ...]]] = {
    "default": (1, ((0, 0),)),
    "high": (2, ((1, 0), (0, 1), (0, 0))),
    "highest": (3, ((1, 1), (0, 2), (2, 0), (0, 1), (1, 0), (0, 0))),
}

_library: torch.library.Library | None = None
#: (op name, its operands' shapes and dtypes) -> the op's XLA computation for them
_computations: dict[tuple, Any] = {}


def _in_graph(
    name: str, lowering: Callable[..., Any], tensors: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """`lowering` (a function of XLA builder ops) applied to `tensors` as one lazy op: a user
    computation of torch_xla, built once per operand shapes. Not through torch_xla's
    `xla_op_registry.Op`, whose every call pickles the operands' shapes for its cache key: that
    made rounding a dot's two operands cost 11.5 us, against 3.6 us so (measured, 8x32 and
    32x10), and `.to(bfloat16).to(float32)` twice 17 us."""
    import torch_xla

    key = (name, *((t.shape, t.dtype) for t in tensors))
    computation = _computations.get(key)
    if computation is None:
        import torch_xla.core.xla_builder as xb

        computation = xb.create_computation(name, lowering, xb.tensor_shape(tensors))
        _computations[key] = computation
    return torch_xla._XLAC._xla_user_computation(f"xla::_op_{name}", tensors, computation)


def _truncate_lowering(values: Any) -> Any:
    """XLA's BitcastConvert and And: the f32 `values` with their low 16 bits cleared (torch has
    no lazy bitcast on XLA tensors: `view(dtype)` falls back to the CPU)."""
    import torch_xla.core.xla_builder as xb

    bits = values.bitcast(xb.Type.S32)
    return (bits & bits.scalar_like(-(1 << 16))).bitcast(xb.Type.F32)


def _round_lowering(*values: Any) -> Any:
    """XLA's ConvertElementType to bf16 and back, for each of the f32 `values`."""
    import torch_xla.core.xla_builder as xb

    converted = [value.cast(xb.Type.BF16).cast(xb.Type.F32) for value in values]
    return converted[0] if len(converted) == 1 else xb.Op.tuple(converted)


def truncate_to_bf16(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` (f32, on an XLA device) truncated to bf16 (the low 16 bits cleared), in f32."""
    return _in_graph("xlasim_bf16_truncate", _truncate_lowering, (tensor,))[0]


def rounded(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Each of `tensors` (f32, on an XLA device) rounded to the nearest bf16 (ties to even),
    kept in f32, all of them in one lazy op (`_in_graph`)."""
    return tuple(_in_graph(f"xlasim_bf16_round_{len(tensors)}", _round_lowering, tensors))


def round_to_bf16(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` (f32, on an XLA device) rounded to the nearest bf16 (ties to even), in f32."""
    return rounded(tensor)[0]


def parts(tensor: torch.Tensor, count: int) -> list[torch.Tensor]:
    """`tensor` split into `count` bf16-valued f32 tensors, as XLA splits an MXU operand: one
    part is the operand rounded to bf16; of two or three, every part but the last is the
    truncation (to bf16) of what the parts before it leave, the last one that rest rounded.

    Args:
        tensor: an f32 tensor on an XLA device.
        count: 1, 2 or 3.
    """
    result, rest = [], tensor
    for _ in range(count - 1):
        leading = truncate_to_bf16(rest)
        result.append(leading)
        rest = rest - leading  # exact: the truncation shares the rest's exponent and top bits
    result.append(round_to_bf16(rest))
    return result


def mxu_product(
    product: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    lhs: torch.Tensor,
    rhs: torch.Tensor,
    precision: str,
) -> torch.Tensor:
    """`product(lhs, rhs)` as the MXU computes it at `precision`: the products of the operands'
    bf16 parts (each an f32-accumulated product of bf16 values) added in XLA's order. A NaN in
    the sum of the minor products (an infinite operand: inf - inf in its split) counts as 0, as
    in XLA, so the leading product decides.

    Args:
        product: a bilinear f32 product (a dot, or a convolution without bias).
        lhs: its first operand (f32).
        rhs: its second operand (f32).
        precision: 'default', 'high' or 'highest'.
    """
    count, passes = PASSES[precision]
    if count == 1:
        return product(*rounded(lhs, rhs))
    lhs_parts, rhs_parts = parts(lhs, count), parts(rhs, count)
    *minor, (i, j) = passes
    leading = product(lhs_parts[i], rhs_parts[j])
    total = None
    for i, j in minor:
        term = product(lhs_parts[i], rhs_parts[j])
        total = term if total is None else total + term
    total = torch.where(total.abs() <= float("inf"), total, 0.0)
    return total + leading


#: torch dtype -> the element type torch_xla gives XLA tensors of it in this process. It is not
#: always the torch dtype's: `XLA_USE_BF16=1` holds f32 and f64 as bf16, `XLA_DOWNCAST_BF16=1`
#: f32 as bf16 and f64 as f32 (Lightning's 'bf16-true' sets the first), while the tensors still
#: say float32/float64. torch_xla reads both variables once per process (`dtype.cpp`, static), so
#: the answer for a dtype, read off the first operand of it, holds for the process's life; a
#: worker forked later inherits it with the C++ value it came from.
_element_types: dict[torch.dtype, str] = {}


def _element_type(tensor: torch.Tensor) -> str:
    found = _element_types.get(tensor.dtype)
    if found is None:
        import torch_xla

        found = torch_xla._XLAC._get_xla_tensor_shape_type(tensor)
        _element_types[tensor.dtype] = found
    return found


def _f32(*tensors: torch.Tensor) -> bool:
    """Whether XLA holds every one of `tensors` in f32: what the MXU rounds. Operands XLA already
    holds in bf16 are what a TPU multiplies as they are, one pass, so the original kernel is the
    TPU's arithmetic for them (and rounding them would mix f32 into a bf16 graph, which XLA's
    verifier refuses); an f64 tensor held in f32 (`XLA_DOWNCAST_BF16`) is rounded as f32 is."""
    return all(_element_type(t) == "f32" for t in tensors)


class PrecisionChangeWarning(UserWarning):
    """A dot computes at another precision than torch_xla's setting asks: a graph of its
    structure was compiled at the old one before the setting changed, and a TPU runs that
    executable again (xlasim/tpu/compiled_precision.py). Silent on a TPU; said here."""


def _frozen(value: Any) -> Any:
    """`value` with its lists as tuples (a convolution's strides...), to be part of a key."""
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(item) for item in value)
    return value


def _precision(op: str, operands: Sequence[torch.Tensor], arguments: Any = ()) -> str:
    """The precision the dot `op` of `operands` traced now computes at, as on a TPU: the one a
    graph of its structure was first compiled at in this process, else the setting's."""
    import torch_xla

    setting = torch_xla._XLAC._xla_get_mat_mul_precision()
    precision = compiled_precision.precision_for(op, operands, _frozen(arguments), setting)
    if precision != setting:
        warnings.warn(
            PrecisionChangeWarning(
                f"this {op} computes at {precision!r}, not at torch_xla's setting {setting!r}: "
                f"a graph of its structure was compiled at {precision!r} earlier in this "
                "process, and torch_xla's compilation cache does not key on the setting, so a "
                "TPU runs that executable again. Set the precision once, before the first "
                "matmul, or run each precision in a process of its own."
            ),
            stacklevel=3,  # the user's line: _precision <- our kernel <- (dispatcher) <- caller
        )
    return precision


def _dot_kernel(op: str) -> Callable:
    """A replacement for `aten::op(self, other)` (mm, bmm, dot, mv) at the setting's precision."""
    original = torch.library.get_kernel(f"aten::{op}", "XLA")

    def kernel(keyset, lhs, rhs):
        if not (emulating() and _f32(lhs, rhs)):
            return original.call_boxed(keyset, lhs, rhs)
        precision = _precision(op, (lhs, rhs))
        return mxu_product(lambda a, b: original.call_boxed(keyset, a, b), lhs, rhs, precision)

    return kernel


def _biased_dot_kernel(op: str, plain: str) -> Callable:
    """A replacement for `aten::op(bias, lhs, rhs, beta, alpha)` (addmm, baddbmm): the product at
    the setting's precision, then the bias in f32 (one pass: the original kernel, as lowered)."""
    original = torch.library.get_kernel(f"aten::{op}", "XLA")
    product = torch.library.get_kernel(f"aten::{plain}", "XLA")

    def kernel(keyset, bias, lhs, rhs, *, beta=1, alpha=1):
        if not (emulating() and _f32(lhs, rhs)):
            return original.call_boxed(keyset, bias, lhs, rhs, beta=beta, alpha=alpha)
        precision = _precision(op, (bias, lhs, rhs), (beta, alpha))
        if precision == "default":
            a, b = rounded(lhs, rhs)
            return original.call_boxed(keyset, bias, a, b, beta=beta, alpha=alpha)
        total = mxu_product(lambda a, b: product.call_boxed(keyset, a, b), lhs, rhs, precision)
        scaled_bias = bias if beta == 1 else bias * beta
        return torch.add(scaled_bias, total, alpha=alpha)

    return kernel


def _convolution_kernel() -> Callable:
    """`aten::convolution_overrideable`: the setting's precision, but transposed convolutions
    take 'default' (torch_xla lowers them through its backward-input path, see the note)."""
    original = torch.library.get_kernel("aten::convolution_overrideable", "XLA")

    def kernel(keyset, inputs, weight, bias, stride, padding, dilation, transposed, *rest):
        def convolve(a, b, with_bias=None):
            return original.call_boxed(
                keyset, a, b, with_bias, stride, padding, dilation, transposed, *rest
            )

        if not (emulating() and _f32(inputs, weight)):
            return convolve(inputs, weight, bias)
        operands = (inputs, weight) if bias is None else (inputs, weight, bias)
        geometry = (stride, padding, dilation, transposed, *rest)
        precision = "default" if transposed else _precision("convolution", operands, geometry)
        if precision == "default":
            return convolve(*rounded(inputs, weight), bias)
        total = mxu_product(convolve, inputs, weight, precision)
        if bias is None:
            return total
        return total + bias.reshape(1, -1, *([1] * (total.dim() - 2)))

    return kernel


def _convolution_backward_kernel() -> Callable:
    """`aten::convolution_backward_overrideable`: 'default' always (torch_xla 2.9 lowers both
    gradient convolutions with TensorFlow's TF32 switch, on: DEFAULT); the bias gradient is a
    sum in f32 of the unrounded output gradient."""
    original = torch.library.get_kernel("aten::convolution_backward_overrideable", "XLA")

    def kernel(keyset, grad, inputs, weight, *geometry_and_mask):
        *geometry, mask = geometry_and_mask
        if not (emulating() and _f32(grad, inputs, weight)):
            return original.call_boxed(keyset, grad, inputs, weight, *geometry, mask)
        g, x, w = rounded(grad, inputs, weight)
        grad_input, grad_weight, _ = original.call_boxed(
            keyset, g, x, w, *geometry, [mask[0], mask[1], False]
        )
        grad_bias = None
        if mask[2]:
            grad_bias = original.call_boxed(
                keyset, grad, inputs, weight, *geometry, [False] * 2 + [True]
            )[2]
        return grad_input, grad_weight, grad_bias

    return kernel


class _RoundOperand(torch.autograd.Function):
    """Forward: the operand rounded to bf16; backward: the gradient unchanged (it is the MXU's
    input, not a function the model computes)."""

    @staticmethod
    def forward(ctx, tensor):
        return round_to_bf16(tensor)

    @staticmethod
    def backward(ctx, grad):
        return grad


class _RoundGradient(torch.autograd.Function):
    """Forward: unchanged; backward: the output gradient rounded to bf16, as the MXU reads it
    in the backward einsums."""

    @staticmethod
    def forward(ctx, tensor):
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx, grad):
        return round_to_bf16(grad) if _f32(grad) else grad


def lowered_by_torch_xla(equation: str) -> bool:
    """Whether torch_xla lowers a two-operand einsum itself (at DEFAULT) rather than leaving it
    to `at::native::einsum` (bmm: the setting), as its `EinsumUtilities::EquationIsValid` says:
    an explicit output, and every index of each term found in another term.

    Args:
        equation: the einsum equation.
    """
    compact = "".join(equation.split())
    inputs, arrow, output = compact.partition("->")
    first, comma, second = inputs.partition(",")
    if not (arrow and comma):
        return False
    terms = (first, second, output)
    return all(
        any(index in other for k, other in enumerate(terms) if k != i)
        for i, term in enumerate(terms)
        for index in term
    )


def _einsum_kernel() -> Callable:
    """`aten::einsum` at AutogradXLA, where torch_xla implements it with its own backward:
    'default' forward and backward, whatever the setting (its lowering fixes DEFAULT). What
    torch_xla does not lower itself decomposes into bmm, which takes the setting, as on a TPU."""
    original = torch.library.get_kernel("aten::einsum", "AutogradXLA")

    def kernel(keyset, equation: str, tensors: Sequence[torch.Tensor], *, path=None):
        if not (
            emulating() and len(tensors) == 2 and _f32(*tensors) and lowered_by_torch_xla(equation)
        ):
            return original.call_boxed(keyset, equation, tensors, path=path)
        rounded = [_RoundOperand.apply(t) for t in tensors]
        return _RoundGradient.apply(original.call_boxed(keyset, equation, rounded, path=path))

    return kernel


def _dot_general(original: Callable[..., Any]) -> Callable[..., Any]:
    """torch_xla's `_XLAC._xla_dot_general` (XLA's DotGeneral, called by
    `xla_quantized_matmul` and users) at DEFAULT, whatever the setting: torch_xla builds it with
    no precision config (`ops/dot_general.cpp`), and a TPU's DEFAULT is one bf16 pass. It is a
    function of torch_xla's C++ module, not an op of torch's dispatcher, so it is replaced at its
    attribute, where callers look it up (`patches`)."""

    @functools.wraps(original)
    def dot_general(
        lhs, rhs, dimension_numbers, precision_config=None, preferred_element_type=None
    ):
        if emulating() and _on_xla(lhs, rhs) and _f32(lhs, rhs):
            lhs, rhs = rounded(lhs, rhs)
        return original(lhs, rhs, dimension_numbers, precision_config, preferred_element_type)

    return dot_general


def _on_xla(*tensors: Any) -> bool:
    return all(isinstance(t, torch.Tensor) and t.device.type == "xla" for t in tensors)


def patches() -> list[tuple[Any, str, Any]]:
    """The TPU arithmetic's attribute patches (the dispatcher's kernels are `install`'s)."""
    import torch_xla

    xlac = torch_xla._XLAC
    return [(xlac, "_xla_dot_general", _dot_general(xlac._xla_dot_general))]


def install() -> None:
    """Replace the XLA kernels of the ops that lower to a dot or a convolution (once per
    process; an emulated process only: natively nothing of this runs)."""
    global _library
    if _library is not None:
        return
    kernels = {
        "mm": _dot_kernel("mm"),
        "bmm": _dot_kernel("bmm"),
        "dot": _dot_kernel("dot"),
        "mv": _dot_kernel("mv"),
        "addmm": _biased_dot_kernel("addmm", "mm"),
        "baddbmm": _biased_dot_kernel("baddbmm", "bmm"),
        "convolution_overrideable": _convolution_kernel(),
        "convolution_backward_overrideable": _convolution_backward_kernel(),
    }
    einsum = _einsum_kernel()
    library = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():  # "Overriding a previously registered kernel": we mean it
        warnings.simplefilter("ignore", UserWarning)
        for op, kernel in kernels.items():
            library.impl(op, kernel, "XLA", with_keyset=True, allow_override=True)
        library.impl("einsum", einsum, "AutogradXLA", with_keyset=True, allow_override=True)
    _library = library
