"""The fault matrix: slow cells (marked `slow`) run only when asked for (`-m slow`, or any
`-m` expression naming it); the default run keeps the fast ones. See docs/faults.md."""

from __future__ import annotations


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: a fault cell that takes long; run with -m slow (docs/faults.md)"
    )


def pytest_collection_modifyitems(config, items):
    if "slow" in (config.option.markexpr or ""):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
