"""pytest-cov's report counts what the ranks ran: their worker processes have written their
coverage data before pytest-cov combines it with this process's.

Ranks in worker processes measure themselves with this process's coverage.py configuration and
write parallel data files beside its own (xlasim/ranks/rank_coverage.py); pytest-cov combines
the data files it finds there when the test loop ends, in its `pytest_runtestloop` wrapper. This
wrapper runs inside that one (`trylast`: its code after the loop runs first) and closes the
warm world, whose workers save their data as they stop: a worker still measuring after the
combination would leave a data file of its own behind (coverage.py saves again at a process's
end). The native backend's workers (`xmp.spawn`'s processes) are stopped the same way, and
waited for, and so are the SPMD workers (`spmd_processes.py`). Ranks that are threads of this
process are measured by its own coverage. On a machine of a pod, every machine's data is first
sent to every other (`xlasim/ranks/pod_coverage.py`): each machine's report is the pod's.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from ..options.settings import resolve
from ..session import backend_key, executor_key, is_active
from ..spmd.processes import workers_key

#: How long the native backend's and the SPMD workers may take to end (saving their data) once
#: told to stop.
STOP_S = 30.0


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtestloop(session: pytest.Session) -> Generator[None, object, object]:
    try:
        return (yield)
    finally:
        if is_active(session.config):
            _save_ranks_coverage(session.config)


def _save_ranks_coverage(config: pytest.Config) -> None:
    """Stop the ranks' worker processes (the emulated world's, the native backend's, the SPMD
    workers), which write their coverage data as they stop, when coverage.py measures this
    session (nothing to do, and nothing imported, otherwise). The test loop is over: a later
    launch starts them afresh."""
    from ...ranks import rank_coverage

    if rank_coverage.requested() is None:
        return
    if workers_key in config.stash:  # the SPMD workers, in either backend
        config.stash[workers_key].close(wait=STOP_S)
    if config.stash[backend_key] == "native":
        if executor_key in config.stash:
            config.stash[executor_key].close(wait=STOP_S)
        return
    from ...ranks import warm_world

    if resolve(config).pod is not None:  # every machine's report is the pod's
        _share_across_machines()
    warm_world.close()


def _share_across_machines() -> None:
    """On a machine of a pod: what every machine measured, exchanged while the pod is joined
    (`xlasim/ranks/pod_coverage.py`)."""
    from ... import activation
    from ...pods.membership import from_environment
    from ...ranks import pod_coverage

    bound = from_environment().join_timeout  # type: ignore[union-attr]
    pod_coverage.share_across_machines(activation.world(), bound)
