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

Loaded only when the session asks for XLA (see `backends/choice`); a session woken up by a collected
test loads it at the end of collection and gives it to the `@given` tests collected with
Hypothesis' automatic profile. `--hypothesis-profile=NAME`, or a profile a conftest.py loaded,
takes precedence. Hypothesis'
own automatic choices (`default`, and `ci` when it detects a CI machine) do not: the xla profile
is loaded on top of them, keeping what `ci` sets (derandomized examples, printed blobs).
"""

from __future__ import annotations

from typing import Any

import pytest

from ..session import backend_key, is_active, woken_by_key

PROFILES = {"emulated": "xla-emulated", "native": "xla-tpu"}
#: Profiles Hypothesis loads by itself; anything else was the user's choice.
AUTOMATIC = ("default", "ci")
_chosen_key = pytest.StashKey[bool]()


def register(config: pytest.Config, parent=None) -> None:
    """Register the backends' Hypothesis profiles: no deadline (a first XLA compilation takes
    seconds), examples kept under the rootdir, fewer examples on a real TPU.

    Args:
        config: the session's config; its rootdir holds `.hypothesis/examples`.
        parent: the Hypothesis `settings` the profiles inherit from (the profile loaded
            automatically, so its options carry over); None inherits Hypothesis' defaults.
    """
    from hypothesis import settings
    from hypothesis.database import DirectoryBasedExampleDatabase

    database = DirectoryBasedExampleDatabase(config.rootpath / ".hypothesis" / "examples")
    settings.register_profile("xla-emulated", parent, deadline=None, database=database)
    settings.register_profile("xla-tpu", parent, deadline=None, database=database, max_examples=25)


def choose(config: pytest.Config) -> None:
    """Register the profiles and load the backend's, unless the user chose a profile."""
    from hypothesis import settings

    config.stash[_chosen_key] = True
    current = settings.get_current_profile_name()
    automatic = current in AUTOMATIC
    register(config, settings.get_profile(current) if automatic else None)
    chosen = getattr(config.option, "hypothesis_profile", None)
    if chosen is None and automatic:
        settings.load_profile(PROFILES[config.stash[backend_key]])


def _importable() -> bool:
    try:
        import hypothesis  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if is_active(config) and _importable():
        choose(config)


def pytest_collection_finish(session: pytest.Session) -> None:
    """A session woken up by a collected test: the test modules were imported, and their
    `@given` tests took the profile in force then. Those that took Hypothesis' automatic one
    get the xla profile now, keeping the settings they gave themselves."""
    config = session.config
    if not is_active(config) or woken_by_key not in config.stash or _chosen_key in config.stash:
        return
    if not _importable():
        return
    from hypothesis import settings

    before = settings.default
    choose(config)
    if settings.default is not before:
        for item in session.items:
            _rebase(item, before, settings.default)


def _rebase(item: pytest.Item, old: Any, new: Any) -> None:
    """Give a `@given` test that took the `old` default profile the `new` one instead, with
    the values its own `@settings` changed."""
    from hypothesis import settings

    try:
        from hypothesis._settings import all_settings
    except ImportError:  # another Hypothesis: leave the test as it was decorated
        return
    function = getattr(getattr(item, "obj", None), "__func__", getattr(item, "obj", None))
    if not getattr(function, "is_hypothesis_test", False):
        return
    own = getattr(function, "_hypothesis_internal_use_settings", None)
    if own is None:
        return
    if own is old:
        function._hypothesis_internal_use_settings = new
        return
    changed = {
        name: getattr(own, name)
        for name in all_settings
        if getattr(own, name) != getattr(old, name)
    }
    function._hypothesis_internal_use_settings = settings(new, **changed)
