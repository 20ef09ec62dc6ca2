"""Public functions of two or more parameters say what each one is (issue 36, item 5).

A reader calling `encode(payload, arena)` should not have to read its body to learn what an
arena is or what `None` means. The docstring of every such function holds a Google-style
`Args:` block: `Args:`, then one line per parameter, indented, `name: what it is` (a longer
description continues on lines indented further). The block must name each parameter and
nothing else, so a block that forgot a parameter added later, or still names one since removed,
fails too.

"Such a function": a function or method whose name does not start with `_` or `pytest_` (pytest
documents its hooks), at a module's top or in a class whose name does not start with `_`, with
two or more parameters besides `self`/`cls`; `*args` and `**kwargs` count, and are named by
their bare names (`args:`). Read from the source with `ast`; one test per folder of xlasim/
(and one for the modules at its top), so a failure says where.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import xlasim

PACKAGE = Path(xlasim.__file__).parent

TOP_LEVEL = "top-level"

#: An entry of the block: `name:` or `name (type):`, then the description or the line's end.
_ENTRY = re.compile(r"(\w+)(?: \([^)]*\))?:(?:\s|$)")

Function = ast.FunctionDef | ast.AsyncFunctionDef


def _public_functions(tree: ast.AST, owner: str = "") -> Iterator[tuple[str, Function]]:
    """The public functions and methods of a module, with their dotted names in it."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            yield from _public_functions(node, f"{owner}{node.name}.")
        elif isinstance(node, Function) and not node.name.startswith(("_", "pytest_")):
            yield f"{owner}{node.name}", node


def _parameters(function: Function) -> list[str]:
    """What a caller passes, in order: every parameter but `self`/`cls`, `*args` as `args`."""
    arguments = function.args
    named = arguments.posonlyargs + arguments.args + arguments.kwonlyargs
    names = [a.arg for a in named if a.arg not in ("self", "cls")]
    names += [a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None]
    return names


def _args_block(docstring: str) -> tuple[list[str], list[str]] | None:
    """The names the docstring's `Args:` block describes and its lines that describe none, or
    None without a block. The block ends at a blank line or a line indented no deeper than
    `Args:`; its entries are its least indented lines, deeper ones continue an entry."""
    lines = docstring.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "Args:"), None)
    if start is None:
        return None
    outer = len(lines[start]) - len(lines[start].lstrip())
    body: list[str] = []
    for line in lines[start + 1 :]:
        if not line.strip() or len(line) - len(line.lstrip()) <= outer:
            break
        body.append(line)
    if not body:
        return [], []
    indent = min(len(line) - len(line.lstrip()) for line in body)
    names, strays = [], []
    for line in body:
        if len(line) - len(line.lstrip()) > indent:
            continue
        entry = _ENTRY.match(line.strip())
        if entry:
            names.append(entry.group(1))
        else:
            strays.append(line.strip())
    return names, strays


def _problems(path: Path) -> Iterator[str]:
    """What is wrong with the `Args:` blocks of one module, one line per function."""
    where = path.relative_to(PACKAGE.parent)
    for name, function in _public_functions(ast.parse(path.read_text(), str(path))):
        parameters = _parameters(function)
        if len(parameters) < 2:
            continue
        here = f"{where}:{function.lineno} {name}({', '.join(parameters)})"
        block = _args_block(ast.get_docstring(function) or "")
        if block is None:
            yield f"{here}: no Args: block"
            continue
        described, strays = block
        missing = [p for p in parameters if p not in described]
        unknown = [d for d in described if d not in parameters]
        if missing:
            yield f"{here}: Args: does not name {', '.join(missing)}"
        if unknown:
            yield f"{here}: Args: names {', '.join(unknown)}, not parameters"
        for stray in strays:
            yield f"{here}: Args: line {stray!r} is not `name: what it is`"


def _folders() -> list[str]:
    folders = (p.name for p in PACKAGE.iterdir() if p.is_dir() and any(p.rglob("*.py")))
    return [*sorted(folders), TOP_LEVEL]


def _modules(folder: str) -> list[Path]:
    if folder == TOP_LEVEL:
        return sorted(PACKAGE.glob("*.py"))
    return sorted((PACKAGE / folder).rglob("*.py"))


@pytest.mark.parametrize("folder", _folders())
def test_public_functions_of_two_or_more_parameters_describe_each(folder: str) -> None:
    problems = [problem for path in _modules(folder) for problem in _problems(path)]
    assert not problems, f"{len(problems)} in {folder}:\n" + "\n".join(problems)
