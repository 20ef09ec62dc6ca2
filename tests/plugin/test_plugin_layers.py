"""The plugin's layers: hook modules on top of library modules, and the backend behind a hook.

As in pytest-xdist, the modules pytest registers (listed in `xlasim/pytest_plugin/__init__.py`)
hold hooks and fixtures; what they share lives in library modules that register nothing. A hook
module that imported another would make the order pytest registers them in matter, and hide
where a function lives. The backend is chosen by the `pytest_xlasim_choose_backend` hook, so a
plugin can decide it (xlasim's own answer comes last), and every backend provides what
`backends/protocol.py`'s `Executor` names, as pytest-xdist's schedulers do its `Scheduling`.
"""

import ast
import inspect
from pathlib import Path

import pytest

import xlasim.pytest_plugin
from xlasim.pytest_plugin.backends.emulated import EmulatedExecutor
from xlasim.pytest_plugin.backends.native import NativeExecutor
from xlasim.pytest_plugin.backends.protocol import Executor

PLUGIN = Path(xlasim.pytest_plugin.__file__).parent


def hook_modules() -> list[str]:
    """The modules `__init__.py` lists for pytest to register, by their full names."""
    return list(xlasim.pytest_plugin.pytest_plugins)


def module_name(path: Path) -> str:
    parts = path.relative_to(PLUGIN.parent.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_plugin_modules(path: Path) -> set[str]:
    """The plugin's modules a module imports (`from .x import y`, `from ..x import y`,
    `from . import x`), by their full names."""
    package = module_name(path).split(".")[: -1 if path.name != "__init__.py" else None]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            source = ".".join(
                package[: len(package) - node.level + 1] + ([node.module] if node.module else [])
            )
            found.update([source, *(f"{source}.{alias.name}" for alias in node.names)])
    return found


def test_no_module_imports_a_hook_module() -> None:
    hooks = set(hook_modules())
    assert {
        "xlasim.pytest_plugin.backends.choice",
        "xlasim.pytest_plugin.per_rank.calls",
        "xlasim.pytest_plugin.spmd.marked",
        "xlasim.pytest_plugin.reporting.terminal",
    } <= hooks  # the list was read
    offenders = {
        module_name(path): sorted(imported_plugin_modules(path) & hooks)
        for path in PLUGIN.rglob("*.py")
        if path != PLUGIN / "__init__.py" and imported_plugin_modules(path) & hooks
    }
    assert offenders == {}, f"modules importing hook modules: {offenders}"


def _parameters(function: object) -> list[tuple[str, object, object]]:
    """A function's parameters as names, kinds and defaults (annotations are strings here,
    written as each module imports the types)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def _assigned_in_init(backend: type) -> set[str]:
    init = ast.parse(inspect.getsource(backend.__init__).strip())
    return {
        node.attr
        for node in ast.walk(init)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
    }


@pytest.mark.parametrize("backend", [EmulatedExecutor, NativeExecutor])
def test_every_backend_provides_what_the_protocol_names(backend: type) -> None:
    attributes = set(Executor.__annotations__)
    methods = {name for name in vars(Executor) if not name.startswith("_")} - attributes
    assert {"name", "counts", "size", "run_ranks"} <= attributes | methods  # the protocol was read
    missing = attributes - set(vars(backend)) - _assigned_in_init(backend)
    assert missing == set(), f"{backend.__name__} lacks {sorted(missing)}"
    for name in sorted(methods):
        ours, theirs = getattr(Executor, name), getattr(backend, name, None)
        if isinstance(ours, property):
            assert isinstance(theirs, property), f"{backend.__name__}.{name} is not a property"
        else:
            assert theirs is not None, f"{backend.__name__} lacks {name}"
            # The protocol's parameters, then only optional ones (`NativeExecutor.close`'s wait).
            given, asked = _parameters(theirs), _parameters(ours)
            assert given[: len(asked)] == asked, f"{backend.__name__}.{name}"
            extra = [
                p for p, _, default in given[len(asked) :] if default is inspect.Parameter.empty
            ]
            assert extra == [], f"{backend.__name__}.{name} requires {extra}"


CHOOSER = """
def pytest_xlasim_choose_backend(config, asked):
    return {"native": "emulated", "auto": None}.get(asked, "tpu")
"""


def test_a_plugin_chooses_the_backend(pytester, inner_environment) -> None:
    pytester.makepyfile(chooser=CHOOSER, test_x="def test_x(): pass")
    inner_environment.setenv("PYTHONPATH", str(pytester.path))

    def session(*args: str):
        return pytester.runpytest_subprocess(
            "-p",
            "no:cacheprovider",
            "-p",
            "chooser",
            "--co",
            "--xla-devices=2",
            *args,
            timeout=300,
        )

    # Asked for native on a machine without a TPU, the plugin's answer wins: emulated.
    session("--xla-backend=native").stdout.fnmatch_lines(
        ["xlasim: backend emulated, 2 XLA devices*"]
    )
    # None leaves the choice to xlasim's own implementation (auto on a CPU: emulated).
    session().stdout.fnmatch_lines(["xlasim: backend emulated, 2 XLA devices*"])
    wrong = session("--xla-backend=emulated")
    wrong.stderr.fnmatch_lines(
        [
            "ERROR: xlasim: pytest_xlasim_choose_backend returned 'tpu'; a backend is one of "
            "emulated, native"
        ]
    )
    assert wrong.ret == 4  # pytest's usage-error exit code
