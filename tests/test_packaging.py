"""What installing xlasim puts into a user's environment (issue 13, point 4)."""

import subprocess
import sys
from importlib.metadata import distribution


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
