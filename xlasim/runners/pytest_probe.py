"""A pytest plugin every runner loads (`-p xlasim.runners.pytest_probe`) next to
xlasim's own, for what junit cannot tell it.

- Each test's launches and collectives on the emulated world during its call, as junit
  properties: a torch_xla test whose ranks returned early on non-TPU hardware passes under
  pytest, and these counts show that it tested nothing.
- With `XLASIM_CONFORMANCE_PROGRESS=PATH`, each test's id as it starts, flushed at once: junit is
  written at the end of the session, so when XLA aborts the process this names the test that
  was running.
"""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from ..activation import world
from ..base.emulated_slice import is_emulated
from .probe_names import COLLECTIVES, LAUNCHES, PROGRESS_ENV


def _counts() -> tuple[int, Counter[str]]:
    if not is_emulated():
        return 0, Counter()
    emulated = world()
    return emulated.launches, Counter(emulated.collectives)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    launches, collectives = _counts()
    yield
    launches_after, collectives_after = _counts()
    item.user_properties.append((LAUNCHES, launches_after - launches))
    item.user_properties.append((COLLECTIVES, json.dumps(collectives_after - collectives)))


def pytest_runtest_logstart(nodeid: str) -> None:
    path = os.environ.get(PROGRESS_ENV)
    if path:
        with open(path, "a") as progress:
            progress.write(nodeid + "\n")
