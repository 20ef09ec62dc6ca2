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
