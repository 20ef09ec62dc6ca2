"""The core's layers: each folder one concern, imports going one way (docs/architecture.md).

From the bottom: `base` (errors, the slice's shape, the process's slice, which rank a thread
is), `reports`, `emulation` (torch_xla's collectives and queries, emulated), `ranks` (worlds of
threads and worker processes, torch_xla's launchers on them), the entry points at the top of the
package, the tools above them, the `xlasim` command, and the public surface (`xlasim/__init__.py`,
whose names come from every layer) last. A module imports only its own
layer or lower ones, and no files import each other in a circle, counting the imports under
`if TYPE_CHECKING:` (read by type checkers only: a type named from above is still a dependency
on what is above; base/ names what it needs from higher layers as protocols of its own). Read from the source with `ast`, so
function-level imports count too.

What `xlasim.emulate` and the pytest plugin import must not import torch at module level: the
zygote starts first (its import of torch overlaps the launching process's own), and a session
that emulates nothing never pays for torch. The imports that keep torch away are function-level
on purpose; `MUST_STAY_LAZY` lists them and the test checks each still is.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import xlasim

PACKAGE = Path(xlasim.__file__).parent

#: Bottom to top; a name is a folder of the package or a module at its top. `events`, `tpu`,
#: `compilation`, `races` and `pods` are the places of subsystems being added (see
#: docs/architecture.md, "Where new subsystems go").
LAYERS: list[tuple[str, ...]] = [
    ("base",),
    ("reports", "events", "trace_files"),
    ("tpu", "compilation"),
    ("emulation", "races"),
    ("ranks", "pods"),
    ("activation", "torchrun"),
    ("runners",),
    ("pytest_plugin", "conformance", "lightning", "huggingface"),
    ("cli", "__main__"),
    # The public surface re-exports names from every layer (the plugin's `rank_fixture` too),
    # as torch_xla's `distributed/` facades do over `_internal/`: nothing inside imports it.
    ("__init__",),
]
#: Imported before the zygote starts or when pytest loads the plugin: no torch at module level.
TORCH_FREE_ROOTS = ["xlasim", "xlasim.activation", "xlasim.pytest_plugin", "xlasim.cli"]
HEAVY = ("torch", "torch_xla", "numpy")
#: (importer, imported): the function-level imports of torch, or of modules that import it, in
#: modules imported before the zygote starts (above); at module level each would import torch
#: with `xlasim.emulate` or with the plugin.
MUST_STAY_LAZY = {
    ("xlasim.activation", "torch_xla"),
    ("xlasim.activation", "xlasim.ranks.launchers"),
    ("xlasim.activation", "xlasim.ranks.warm_world"),
    ("xlasim.base.rank_context", "torch_xla"),
    ("xlasim.cli", "xlasim.ranks.warm_world"),
    # Ranks' coverage: the world only when coverage.py measures the session (issue 33 item 3).
    ("xlasim.pytest_plugin.reporting.coverage_combine", "xlasim.ranks.warm_world"),
    # A rank's capfd asks its own process's device count, on the rank.
    ("xlasim.pytest_plugin.per_rank.rank_builtins", "torch_xla.runtime"),
    # Recording's wrappers: torch only once a launch is traced (docs/events.md).
    ("xlasim.events.hooks", "torch"),
    ("xlasim.events.hooks", "torch.distributed"),
    ("xlasim.events.hooks", "torch_xla"),
    ("xlasim.events.hooks", "torch_xla.core.xla_model"),
    ("xlasim.events.hooks", "torch_xla.runtime"),
    ("xlasim.events.hooks", "xlasim.reports.callsite"),
    ("xlasim.emulation.patches", "torch_xla"),
    ("xlasim.emulation.patches", "torch_xla.core.xla_model"),
    ("xlasim.emulation.patches", "torch_xla.runtime"),
    ("xlasim.emulation.patches", "xlasim.emulation.collectives"),
    ("xlasim.emulation.patches", "xlasim.emulation.compiled"),
    ("xlasim.emulation.patches", "xlasim.emulation.distributed"),
    ("xlasim.emulation.patches", "xlasim.emulation.seeding"),
    ("xlasim.emulation.patches", "xlasim.emulation.world_of_one"),
    ("xlasim.emulation.patches", "xlasim.tpu.arithmetic"),
    ("xlasim.reports.xla_counters", "torch_xla"),
    ("xlasim.reports.xla_counters", "torch_xla.debug.metrics"),
    ("xlasim.pytest_plugin.per_rank.handles", "torch"),
    ("xlasim.pytest_plugin.per_rank.handles", "torch_xla"),
    ("xlasim.pytest_plugin.per_rank.handles", "torch_xla.runtime"),
    ("xlasim.pytest_plugin.backends.hardware", "torch_xla._internal"),
    ("xlasim.pytest_plugin.remote.rank_side", "xlasim.races.watch"),
    ("xlasim.pytest_plugin.spmd.processes", "torch_xla.distributed.spmd"),
    ("xlasim.pytest_plugin.spmd.processes", "xlasim.ranks.processes"),
}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    #: At module level (runs when the importer is imported), not inside a function.
    eager: bool
    line: int
    #: Under `if TYPE_CHECKING:`: read by type checkers only, never run, but still a dependency
    #: of the importer's meaning, so layers and circles count it.
    typing_only: bool = False


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def _source(importer: str, node: ast.ImportFrom, is_package: bool) -> str:
    """The module an `import from` imports from, relative imports resolved."""
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(importer: str, node: ast.ImportFrom, is_package: bool) -> list[str]:
    """The modules an `import from` names: the submodule when a name is one, else the module."""
    source = _source(importer, node, is_package)
    return [
        f"{source}.{alias.name}" if f"{source}.{alias.name}" in MODULES else source
        for alias in node.names
    ]


def imports_of(name: str) -> list[Import]:
    """Every import of module `name`, those under `if TYPE_CHECKING:` marked `typing_only`."""
    path = MODULES[name]
    found: list[Import] = []

    def visit(nodes: Iterable[ast.AST], eager: bool, typing_only: bool) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.body, False, True)
                visit(node.orelse, eager, typing_only)
            elif isinstance(node, ast.ImportFrom):
                for target in _targets(name, node, path.name == "__init__.py"):
                    found.append(Import(name, target, eager, node.lineno, typing_only))
            elif isinstance(node, ast.Import):
                found.extend(
                    Import(name, alias.name, eager, node.lineno, typing_only)
                    for alias in node.names
                )
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(ast.iter_child_nodes(node), False, typing_only)
            else:
                visit(ast.iter_child_nodes(node), eager, typing_only)

    visit([ast.parse(path.read_text())], True, False)
    return found


IMPORTS = [i for name in MODULES for i in imports_of(name)]
OWN = [i for i in IMPORTS if i.imported in MODULES and i.imported != i.importer]


def place(name: str) -> str:
    """The layer entry a module belongs to: its folder, or its own name at the top."""
    parts = name.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def layer(name: str) -> int:
    for index, entries in enumerate(LAYERS):
        if place(name) in entries:
            return index
    raise AssertionError(f"{name} is in no layer: add its folder to LAYERS (docs/architecture.md)")


def test_every_module_is_in_a_layer() -> None:
    assert len(MODULES) > 60  # the package was read
    for name in MODULES:
        layer(name)


#: The most modules a folder of the package holds, its `__init__.py` counted (issue 36): a
#: folder past it is split into subfolders by concern, as `pytest_plugin/` is.
MOST_MODULES_IN_A_FOLDER = 15


def test_no_folder_holds_more_than_15_modules() -> None:
    counts = Counter(path.parent for path in MODULES.values())
    assert counts[PACKAGE / "pytest_plugin" / "spmd"] > 1  # the folders were read
    crowded = {
        str(folder.relative_to(PACKAGE.parent)): count
        for folder, count in counts.items()
        if count > MOST_MODULES_IN_A_FOLDER
    }
    assert crowded == {}, f"folders of more than {MOST_MODULES_IN_A_FOLDER} modules: {crowded}"


def test_imports_go_down_or_stay_in_their_layer() -> None:
    upward = [
        f"{i.importer} (line {i.line}) imports {i.imported}"
        for i in OWN
        if layer(i.imported) > layer(i.importer)
    ]
    assert upward == [], "imports of a higher layer:\n" + "\n".join(upward)


#: Folders whose modules take no private (underscore) name from another folder: the runners
#: and their kit share what they share through public names (issue 36 item 3).
NO_PRIVATE_IMPORTS = ("runners", "conformance", "lightning", "huggingface")


def private_imports_across_folders(name: str) -> list[str]:
    """`from X import _name` in module `name` where X is in another folder than `name`."""
    path = MODULES[name]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            source = _source(name, node, path.name == "__init__.py")
            private = [a.name for a in node.names if re.fullmatch(r"_(?!_)\w*", a.name)]
            if private and source.startswith("xlasim.") and place(source) != place(name):
                found += [f"{name} (line {node.lineno}) imports {source}.{p}" for p in private]
    return found


def test_the_runners_import_no_private_name_of_another_folder() -> None:
    names = [name for name in MODULES if place(name) in NO_PRIVATE_IMPORTS]
    assert len(names) > 20  # the runners were read
    crossing = [line for name in names for line in private_imports_across_folders(name)]
    assert crossing == [], "private names taken from another folder:\n" + "\n".join(crossing)


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one file (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(edges.get(node, ())):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return circles


def package_edges() -> dict[str, set[str]]:
    """Who imports whom in the package (type-checking imports too), the surface left out: it
    imports from every layer and nothing imports it."""
    edges: dict[str, set[str]] = {}
    for i in OWN:
        if "xlasim" not in (i.importer, i.imported):
            edges.setdefault(i.importer, set()).add(i.imported)
    return edges


def test_no_files_of_the_package_import_each_other_in_a_circle() -> None:
    edges = package_edges()
    assert sum(map(len, edges.values())) > 100  # the imports were read
    assert _circles(edges) == []
    # The check finds a circle where there is one.
    assert _circles({**edges, "xlasim.base.errors": {"xlasim.ranks.world"}}) != []


def eagerly_imported(roots: list[str]) -> set[str]:
    """The package's modules that importing `roots` imports (module-level imports, followed)."""
    eager = {}
    for i in IMPORTS:
        if i.eager and i.imported in MODULES:
            eager.setdefault(i.importer, set()).add(i.imported)
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parents = [".".join(name.split(".")[:n]) for n in range(1, name.count(".") + 1)]
        todo += [*eager.get(name, ()), *(p for p in parents if p in MODULES)]
    return seen


def imports_heavy(name: str) -> bool:
    return any(i.eager and i.imported.split(".")[0] in HEAVY for i in imports_of(name))


def _hook_modules() -> list[str]:
    import xlasim.pytest_plugin

    return list(xlasim.pytest_plugin.pytest_plugins)


def loaded_before_torch() -> set[str]:
    """What `import xlasim`, `xlasim.emulate` (before it starts the zygote), the `xlasim`
    command and pytest's loading of the plugin import, and the base layer."""
    roots = [*TORCH_FREE_ROOTS, *(n for n in MODULES if place(n) == "base"), *_hook_modules()]
    return eagerly_imported(roots)


def test_emulate_and_the_plugin_import_no_torch_before_they_need_it() -> None:
    loaded = loaded_before_torch()
    assert {"xlasim.activation", "xlasim.emulation.patches", "xlasim.base.errors"} <= loaded
    heavy = sorted(name for name in loaded if imports_heavy(name))
    assert heavy == [], f"imported before the zygote starts, these import torch: {heavy}"


def test_the_imports_that_keep_torch_away_are_lazy() -> None:
    loaded = loaded_before_torch()
    heavy_once_imported = {
        name for name in MODULES if any(imports_heavy(m) for m in eagerly_imported([name]))
    }
    lazy = {
        (i.importer, i.imported)
        for i in IMPORTS
        if not i.eager
        and not i.typing_only
        and i.importer in loaded
        and (i.imported in heavy_once_imported or i.imported.split(".")[0] in HEAVY)
    }
    assert sorted(MUST_STAY_LAZY - lazy) == [], "listed, but no longer a lazy import"
    assert sorted(lazy - MUST_STAY_LAZY) == [], "lazy imports that keep torch away: list them"
