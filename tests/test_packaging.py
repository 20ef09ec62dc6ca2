"""What installing xlasim puts into a user's environment (issue 13, point 4)."""

import ast
import pickle
import subprocess
import sys
from importlib.metadata import distribution
from pathlib import Path

import xlasim


def test_only_the_xlasim_package_is_installed() -> None:
    # strategy/ and fixtures/ are reference code to copy (docs/strategy.md): installed, a
    # generic top-level `strategy` package would shadow or clash with a user's own.
    assert distribution("xlasim").read_text("top_level.txt").split() == ["xlasim"]


def test_the_pytest_plugin_is_registered_under_its_name() -> None:
    plugins = distribution("xlasim").entry_points.select(group="pytest11")
    assert [(p.name, p.value) for p in plugins] == [("xlasim", "xlasim.pytest_plugin")]


def test_the_command_works_without_pytest() -> None:
    """`pip install xlasim` has no pytest; `xlasim run` (which builds the runners' parsers too)
    must not need it."""
    hide_pytest = "import sys; sys.modules['pytest'] = None; from xlasim.cli import main; "
    done = subprocess.run(
        [sys.executable, "-c", hide_pytest + "main(['topologies'])"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "v4-8" in done.stdout


def test_the_public_names_are_the_packages_own() -> None:
    """Users import what they call, catch and read from `xlasim` itself (docs/core-api.md),
    whatever folder it lives in; importing the package imports no torch."""
    probe = (
        "import sys, xlasim\n"
        "assert 'torch' not in sys.modules\n"
        "import xlasim.ranks.world\n"  # the module of World: `xlasim.world` stays the function
        "assert callable(xlasim.world) and xlasim.world.__module__ == 'xlasim.activation'\n"
        "missing = [n for n in xlasim.__all__ if getattr(xlasim, n, None) is None]\n"
        "assert not missing, missing\n"
        "assert xlasim.spmd.as_host and issubclass(xlasim.RankExitError, xlasim.XlasimError)\n"
        "print(*sorted(xlasim.__all__))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    names = set(done.stdout.split())
    assert {"RankOutcome", "Collect", "RankExitError", "World", "emulate", "world"} <= names


def _classes_marked_public() -> set[str]:
    """The classes of the package decorated `@public` (xlasim/base/public.py), read with ast."""
    package = Path(xlasim.__file__).parent
    marked = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(d, ast.Name) and d.id == "public" for d in node.decorator_list
            ):
                marked.add(node.name)
    return marked


def test_the_public_types_print_as_users_import_them() -> None:
    """`xlasim.RankFailedError` in a traceback, as in docs/core-api.md and users' `except`
    clauses, not the module of the layer that defines it; every type so named is exported, or
    pickle could not find it."""
    exported = {name for name in xlasim.__all__ if isinstance(getattr(xlasim, name), type)}
    assert {"RankFailedError", "Topology", "World", "OutsideWorldWarning"} <= exported
    assert _classes_marked_public() == exported
    assert {n: getattr(xlasim, n).__module__ for n in exported} == dict.fromkeys(exported, "xlasim")


def _public_values() -> list[object]:
    """An instance of every public error and warning, and of the public types that cross to
    worker processes (a Topology in a worker's spec, a run's Collect, a rank's outcome)."""
    outcome = xlasim.RankOutcome(1, 2, error=xlasim.DeadlockError("ranks disagree"))
    made: dict[str, tuple] = {
        "WorldAbortedError": ("DeadlockError",),
        "RankFailedError": ("rank 1 of 2 raised DeadlockError: ranks disagree", [outcome]),
    }
    values: list[object] = [xlasim.Topology(8), xlasim.Collect(output=True), outcome]
    for name in xlasim.__all__:
        cls = getattr(xlasim, name)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            values.append(cls(*made.get(name, (f"a {name} for the test",))))
    return values


def test_every_public_error_crosses_to_a_fresh_process() -> None:
    """Ranks in worker processes send their errors to the parent pickled: each public type,
    named `xlasim.X`, is found again in a process that imported nothing of xlasim yet."""
    values = _public_values()
    assert sum(isinstance(v, BaseException) for v in values) == 18  # every public error
    show = (
        "import pickle, sys\n"
        "for v in pickle.loads(sys.stdin.buffer.read()):\n"
        "    print(type(v).__module__, type(v).__qualname__, repr(v))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", show],
        input=pickle.dumps(values),
        capture_output=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    sent = [f"xlasim {type(v).__qualname__} {v!r}" for v in values]
    assert done.stdout.decode().splitlines() == sent
    failed = next(v for v in values if type(v) is xlasim.RankFailedError)
    assert type(pickle.loads(pickle.dumps(failed)).failures[1]) is xlasim.DeadlockError


def test_the_public_names_are_one_table() -> None:
    """`xlasim/__init__.py`'s surface is `_EXPORTS` (the lazy imports at run time); `__all__` is
    derived from it, and the imports under `TYPE_CHECKING` (for type checkers and IDEs, which
    cannot follow `__getattr__`) must name the same names from the same modules, each as an
    explicit re-export (ScheduleStalledError was once exported and left out of them)."""
    tree = ast.parse(Path(xlasim.__file__).read_text())
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
    )
    imports = [node for node in block.body if isinstance(node, ast.ImportFrom)]
    typed = {alias.name: node.module.lstrip(".") for node in imports for alias in node.names}
    assert typed == xlasim._EXPORTS
    assert all(alias.asname == alias.name for node in imports for alias in node.names)
    assert xlasim.__all__ == sorted(xlasim._EXPORTS)
