"""Finding where a torch_xla test file asks whether it runs on a TPU, with `ast`.

torch_xla's tests ask in several ways: `xm.xla_device_hw(device) == 'TPU'` (the device's
hardware), `xr.device_type() != 'TPU'` (the runtime's), `os.environ.get('PJRT_DEVICE') == 'TPU'`,
`tpu.version() < 4` and `tpu.num_available_chips()` (the TPU's generation and chips, from
`torch_xla._internal.tpu`), and their own helpers (`test_utils.is_on_tpu()`). On an emulated
TPU every one answers as on a TPU, so each such question is a gate the emulated identity can
open (a test that skips on CPU runs) or close (`skipOnTpu`). The conformance runner's `tpu`
suite is the files with a gate, and the tests behind one are the ones it tables.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Set
from dataclasses import dataclass, field

#: Calls that ask for the hardware or the runtime's device type: compared with 'TPU' or 'CPU'
#: (the two answers the emulated identity changes), a gate.
_HARDWARE_QUERIES = frozenset({"xla_device_hw", "device_type"})
_ANSWERS = frozenset({"TPU", "CPU"})
#: `torch_xla._internal.tpu` queries that only mean something on a TPU: any comparison is a gate.
_TPU_QUERIES = frozenset({"version", "num_available_chips"})


@dataclass(frozen=True)
class Gates:
    """A file's TPU gates: whether it has any, and the functions behind one (a gate in their
    decorators, in their class's decorators, or in their body, directly or through a
    module-level name whose definition holds one: `skipOnTpu = unittest.skipIf(_is_on_tpu(),
    ...)`)."""

    anywhere: bool
    functions: frozenset[str]
    #: Every function the file defines at module level or in a class: a test's name is
    #: matched to the longest of them it starts with (parameterized names carry suffixes).
    defined: frozenset[str]
    #: Each class of the file: (the functions it defines, those of them behind a gate). Two
    #: classes may define a test of one name, one behind a gate and the other not.
    classes: Mapping[str, tuple[frozenset[str], frozenset[str]]] = field(default_factory=dict)


def find_gates(tree: ast.Module) -> Gates:
    """The TPU gates of a parsed test file."""
    answers = _answer_variables(tree)
    gated_names = _gated_module_names(tree, answers)
    functions: set[str] = set()
    defined: set[str] = set()
    classes: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            methods = [
                item
                for item in node.body
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
            ]
            class_gated = any(_has_gate(d, gated_names, answers) for d in node.decorator_list)
            gated = frozenset(
                item.name
                for item in methods
                if class_gated or _has_gate(item, gated_names, answers)
            )
            classes[node.name] = (frozenset(item.name for item in methods), gated)
            defined.update(item.name for item in methods)
            functions.update(gated)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defined.add(node.name)
            if _has_gate(node, gated_names, answers):
                functions.add(node.name)
    anywhere = _has_gate(tree, frozenset(), answers)
    return Gates(anywhere, frozenset(functions), frozenset(defined), classes)


def function_of(test: str, gates: Gates) -> str:
    """The function a test of the file comes from: its own name, or the longest defined name
    it starts with followed by a parameterization suffix (`test_put_xla_float32` from
    `test_put`, `test_gmm0` from `test_gmm`); `test` itself when none matches.

    Args:
        test: a test's name, without file or class (`test_gmm0`).
        gates: the gates of the file it is in, whose `defined` names are matched.
    """
    return _function_among(test, gates.defined)


def is_gated(test_id: str, gates: Gates) -> bool:
    """Whether the test `test_id` (`file::Class::test` or `file::test`) comes from a function
    behind a gate: its own class's, when the file defines the class and the function in it;
    else any function of its name (a class torch generates from the file's, `TestPythonOpsXLA`
    from `TestPythonOps`, or one inheriting its tests).

    Args:
        test_id: a pytest id, `file::Class::test` or `file::test`.
        gates: the gates of the file the test is in.
    """
    parts = test_id.split("::")
    owner, test = (parts[-2] if len(parts) > 2 else ""), parts[-1]
    defined, gated = gates.classes.get(owner, (frozenset(), frozenset()))
    function = _function_among(test, defined)
    if function in defined:
        return function in gated
    return function_of(test, gates) in gates.functions


def _function_among(test: str, names: Set[str]) -> str:
    found = [
        name
        for name in names
        if test == name or (test.startswith(name) and test[len(name)] in "_0123456789")
    ]
    return max(found, key=len, default=test)


def _answer_variables(tree: ast.Module) -> frozenset[str]:
    """Names the file binds to a hardware query's answer (`real_device_type =
    xm.xla_device_hw(...)`, then `if real_device_type == "TPU"`), anywhere in the file."""
    return frozenset(
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and any(
            isinstance(c, ast.Call) and _called_name(c) in _HARDWARE_QUERIES
            for c in ast.walk(node.value)
        )
        for target in node.targets
        if isinstance(target, ast.Name)
    )


def _gated_module_names(tree: ast.Module, answers: frozenset[str]) -> frozenset[str]:
    """Module-level functions and variables whose definition holds a gate (`_is_on_tpu`,
    `skipOnTpu`), followed through one another until nothing new is found."""
    names: set[str] = set()
    while True:
        found = set(names)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if _has_gate(node, frozenset(names), answers):
                    found.add(node.name)
            elif isinstance(node, ast.Assign) and _has_gate(node.value, frozenset(names), answers):
                found.update(t.id for t in node.targets if isinstance(t, ast.Name))
        if found == names:
            return frozenset(names)
        names = found


def _has_gate(node: ast.AST, gated_names: frozenset[str], answers: frozenset[str]) -> bool:
    for inner in ast.walk(node):
        if isinstance(inner, ast.Compare) and _is_gate_comparison(inner, answers):
            return True
        if isinstance(inner, ast.Call) and _called_name(inner).endswith("is_on_tpu"):
            return True
        if isinstance(inner, ast.Name) and inner.id in gated_names:
            return True
    return False


def _is_gate_comparison(compare: ast.Compare, answers: frozenset[str]) -> bool:
    sides = [compare.left, *compare.comparators]
    inner = [node for side in sides for node in ast.walk(side)]
    calls = [node for node in inner if isinstance(node, ast.Call)]
    if any(_is_tpu_query(call) for call in calls):
        return True
    asks = (
        any(_called_name(call) in _HARDWARE_QUERIES for call in calls)
        or any(isinstance(node, ast.Name) and node.id in answers for node in inner)
        or any(_reads_pjrt_device(side) for side in sides)
    )
    return asks and any(isinstance(node, ast.Constant) and node.value in _ANSWERS for node in inner)


def _is_tpu_query(call: ast.Call) -> bool:
    """`tpu.version()`, `tpu.num_available_chips()`."""
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr in _TPU_QUERIES
        and isinstance(func.value, ast.Name)
        and func.value.id == "tpu"
    )


def _reads_pjrt_device(node: ast.AST) -> bool:
    """`os.environ.get('PJRT_DEVICE')` or `os.environ['PJRT_DEVICE']`."""
    return any(
        isinstance(c, ast.Constant) and c.value == "PJRT_DEVICE" for c in ast.walk(node)
    ) and any(isinstance(a, ast.Attribute) and a.attr == "environ" for a in ast.walk(node))


def _called_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""
