"""Hypothesis profiles for distributed tests, chosen by backend unless the user chose one.

- `xla-emulated`: no deadline (an example's time depends on how busy the world's threads and
  the XLA compiler are, not on the code under test), Hypothesis' usual 100 examples.
- `xla-tpu`: the same, with 25 examples, since each one is a real launch on the chips.

Both keep Hypothesis' directory database (under the rootdir's `.hypothesis/examples`) so a
failing example is replayed on the next run. It is safe with several processes (xdist workers,
several hosts on a shared disk): every example is its own file, written to a temporary file and
renamed into place, and directories are made with `exist_ok`; concurrent writers at worst store
the same example twice under the same name. An in-memory database would be safe too, but would
forget failures between runs, which is the point of having one.

`--hypothesis-profile=NAME`, or a profile a conftest.py loaded, takes precedence. Hypothesis'
own automatic choices (`default`, and `ci` when it detects a CI machine) do not: the xla profile
is loaded on top of them, keeping what `ci` sets (derandomized examples, printed blobs).
"""

from __future__ import annotations

import pytest

from .activation import backend_key

PROFILES = {"emulated": "xla-emulated", "native": "xla-tpu"}
#: Profiles Hypothesis loads by itself; anything else was the user's choice.
AUTOMATIC = ("default", "ci")


def register(config: pytest.Config, parent=None) -> None:
    from hypothesis import settings
    from hypothesis.database import DirectoryBasedExampleDatabase

    database = DirectoryBasedExampleDatabase(config.rootpath / ".hypothesis" / "examples")
    settings.register_profile("xla-emulated", parent, deadline=None, database=database)
    settings.register_profile("xla-tpu", parent, deadline=None, database=database, max_examples=25)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    try:
        from hypothesis import settings
    except ImportError:
        return
    current = settings.get_current_profile_name()
    automatic = current in AUTOMATIC
    register(config, settings.get_profile(current) if automatic else None)
    chosen = getattr(config.option, "hypothesis_profile", None)
    if chosen is None and automatic:
        settings.load_profile(PROFILES[config.stash[backend_key]])


def pytest_report_header(config: pytest.Config) -> str | None:
    try:
        from hypothesis import settings
    except ImportError:
        return None
    return f"xlasim: hypothesis profile {settings.get_current_profile_name()}"
