"""The hooks xlasim adds to pytest (as pytest-xdist's `newhooks`), for plugins to implement."""

from __future__ import annotations

import pytest


@pytest.hookspec(firstresult=True)
def pytest_xlasim_choose_backend(config: pytest.Config, asked: str) -> str | None:
    """Which backend runs the session's XLA tests: "emulated" or "native".

    `asked` is what the settings say: "auto", "emulated" or "native". Return a backend to
    decide, or None to leave it to the next implementation; xlasim's own comes last (the
    asked backend, and for "auto" native on a real accelerator, emulated otherwise).
    When a setting asks for XLA the choice is made before any conftest.py is imported, so
    implement this hook in a plugin (installed, or loaded with `-p`).
    """
