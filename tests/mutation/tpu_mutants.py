"""Mutants of the TPU's arithmetic (its passes, operand splits, the ops it reaches, what XLA holds
in bf16) and of the HBM ledger's refusal: xlasim/tpu/."""

from __future__ import annotations

from mutant import mutant

ARITHMETIC = "xlasim/tpu/arithmetic.py"
ARITHMETIC_TESTS = (
    "tests/core/test_tpu_arithmetic.py",
    "tests/properties/test_tpu_arithmetic_properties.py",
    "tests/core/test_bf16_variables.py",
)
HBM_TESTS = ("tests/core/test_hbm.py",)

TPU_MUTANTS = (
    mutant(
        "tpu-default-not-rounded",
        "at 'default' the MXU multiplies the f32 operands as they are (exact f32, a CPU's)",
        ARITHMETIC,
        "        return product(*rounded(lhs, rhs))",
        "        return product(lhs, rhs)",
        ARITHMETIC_TESTS,
    ),
    mutant(
        "tpu-high-drops-a-pass",
        "'high' forgets the lo*hi pass: two passes instead of three",
        ARITHMETIC,
        '    "high": (2, ((1, 0), (0, 1), (0, 0))),',
        '    "high": (2, ((0, 1), (0, 0))),',
        ARITHMETIC_TESTS,
    ),
    mutant(
        "tpu-split-rounds-the-leading-part",
        "the operand split rounds its leading parts where XLA truncates them",
        ARITHMETIC,
        "        leading = truncate_to_bf16(rest)",
        "        leading = round_to_bf16(rest)",
        ARITHMETIC_TESTS,
    ),
    mutant(
        "tpu-einsum-not-rounded",
        "einsum's operands reach torch_xla's kernel unrounded",
        ARITHMETIC,
        "        rounded = [_RoundOperand.apply(t) for t in tensors]",
        "        rounded = list(tensors)",
        ARITHMETIC_TESTS,
    ),
    mutant(
        "tpu-convolution-gradients-exact",
        "convolution gradients computed in exact f32, not at DEFAULT",
        ARITHMETIC,
        "        g, x, w = rounded(grad, inputs, weight)",
        "        g, x, w = grad, inputs, weight",
        ARITHMETIC_TESTS,
    ),
    mutant(
        "tpu-torch-dtype-not-element-type",
        "operands XLA holds in bf16 (XLA_USE_BF16) are rounded as f32 because torch says float32",
        ARITHMETIC,
        '    return all(_element_type(t) == "f32" for t in tensors)',
        "    return all(t.dtype == torch.float32 for t in tensors)",
        ARITHMETIC_TESTS,
    ),
    mutant(
        "tpu-dot-general-at-the-setting",
        "_xla_dot_general is left to the CPU's exact f32",
        ARITHMETIC,
        "        if emulating() and _on_xla(lhs, rhs) and _f32(lhs, rhs):",
        "        if False:",
        ARITHMETIC_TESTS,
    ),
    mutant(
        "hbm-ledger-never-refuses",
        "a step whose live data passes the HBM runs anyway (no RESOURCE_EXHAUSTED)",
        "xlasim/tpu/memory.py",
        "    if live <= limit:\n        _check_host(device, holder, asked, host_available)",
        "    if True:\n        _check_host(device, holder, asked, host_available)",
        HBM_TESTS,
    ),
    mutant(
        "hbm-tensor-counted-twice",
        "a tensor's buffer counts again for every Python tensor holding it",
        "xlasim/tpu/memory.py",
        "        if buffer[1] == 1:\n            device.live += nbytes",
        "        if buffer[1] >= 1:\n            device.live += nbytes",
        HBM_TESTS,
    ),
)
