"""The fixtures tests use to reach the ranks: `xla_rank` (inside ranks) and `xla_world` (outside).

`xla_world` is session-scoped on purpose: the world is per process anyway, and Hypothesis
refuses function-scoped fixtures in `@given` tests, which is where `xla_world.run` is most
useful (every example is drawn once in the parent and handed to every rank).
"""

from __future__ import annotations

import pytest

from ..options.timeouts import timeout_for
from ..session import is_active
from .handles import RankPlaceholder, XlaWorld, world_handle


def pytest_runtest_setup(item: pytest.Item) -> None:
    if not is_active(item.config):
        return
    handle = world_handle(item.config)
    handle.timeout, handle.item = timeout_for(item), item


@pytest.fixture
def xla_rank(request: pytest.FixtureRequest) -> RankPlaceholder:
    """The rank running the test body (`rank`, `world_size`, `local_rank`, `device`).

    Only for `@pytest.mark.xla` tests, whose body runs on every rank.
    """
    if request.node.get_closest_marker("xla") is None:
        pytest.fail(
            f"{request.node.nodeid} asks for xla_rank but is not marked @pytest.mark.xla: only a "
            "marked test's body runs on the ranks (or use the xla_world fixture to run a function)",
            pytrace=False,
        )
    return RankPlaceholder()


@pytest.fixture(scope="session")
def xla_world(pytestconfig: pytest.Config) -> XlaWorld:
    """Runs functions on every rank from a normal (unmarked) test: `xla_world.run(fn, *args)`."""
    return world_handle(pytestconfig)
