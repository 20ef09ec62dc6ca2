"""pytest-cov's report counts what the ranks ran: their worker processes have written their
coverage data before pytest-cov combines it with this process's.

Ranks in worker processes measure themselves with this process's coverage.py configuration and
write parallel data files beside its own (xlasim/ranks/rank_coverage.py); pytest-cov combines
the data files it finds there when the test loop ends, in its `pytest_runtestloop` wrapper. This
wrapper runs inside that one (`trylast`: its code after the loop runs first) and closes the
warm world, whose workers save their data as they stop: a worker still measuring after the
combination would leave a data file of its own behind (coverage.py saves again at a process's
end). The native backend's workers (`xmp.spawn`'s processes) are stopped the same way, and
waited for. Ranks that are threads of this process are measured by its own coverage.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from ..session import backend_key, executor_key, is_active

#: How long the native backend's workers may take to end (saving their data) once told to stop.
NATIVE_STOP_S = 30.0


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtestloop(session: pytest.Session) -> Generator[None, object, object]:
    try:
        return (yield)
    finally:
        if is_active(session.config):
            _save_ranks_coverage(session.config)


def _save_ranks_coverage(config: pytest.Config) -> None:
    """Stop the ranks' worker processes (the emulated world's, the native backend's), which
    write their coverage data as they stop, when coverage.py measures this session (nothing to
    do, and nothing imported, otherwise). The test loop is over: a later launch starts them
    afresh."""
    from ...ranks import rank_coverage

    if rank_coverage.requested() is None:
        return
    if config.stash[backend_key] == "native":
        if executor_key in config.stash:
            config.stash[executor_key].close(wait=NATIVE_STOP_S)
        return
    from ...ranks import warm_world

    warm_world.close()
