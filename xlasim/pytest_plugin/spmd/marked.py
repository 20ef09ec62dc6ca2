"""`@pytest.mark.xla(spmd=True)`: the test body runs once, in an SPMD world over the slice.

`xr.use_spmd()` is process-wide and cannot be undone, so an SPMD test cannot run in the pytest
process (later tests would run in SPMD mode; on the threads mode the ranks are this process)
nor on a rank. It runs in the session's SPMD worker (`spmd/worker`): a process of its own,
started on the first SPMD test and kept warm for the next, with SPMD on and every device of the
slice visible, identity included. One worker per device count (`devices=N` gives a world of N);
a test that crashes the worker or outlives its timeout gets a failure naming that, and the next
SPMD test gets a fresh worker. Everywhere else in an emulated session `xr.use_spmd()` fails with
an error naming the marker (`xlasim.spmd`).

Under `--xla-trace=DIR` the worker records what the runtime lets a program see of an SPMD world:
one process (rank 0, its labels as the runtime answers them), its graph executions and
checkpoints; the collectives are the compiler's, inside the graphs (docs/tracing.md).

The `xla_mesh` fixture is the 1-D mesh over the SPMD world's devices (`xs.get_1d_mesh("data")`),
built in the worker. Fixture values are resolved in the parent and pickled to the worker, as for
per-rank tests in worker processes; a mesh can only be built where SPMD is on, so `xla_mesh` is
a placeholder the worker swaps for the mesh.
"""

from __future__ import annotations

import sys
from collections.abc import Generator
from typing import Any

import pytest

from ...trace_files import session as traces
from ..options.world_sizes import world_size
from ..reporting.outcomes import settle
from ..session import executor, name_trace, traced
from .processes import FunctionReference, MeshPlaceholder, wants_spmd, workers

_rendering_key = pytest.StashKey[Any]()


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not wants_spmd(pyfuncitem):
        return None
    fn = FunctionReference.of(pyfuncitem)
    kwargs = {arg: pyfuncitem.funcargs[arg] for arg in pyfuncitem._fixtureinfo.argnames}
    with traced(pyfuncitem.config, pyfuncitem) as directory, traces.launch() as launch:
        outcome = workers(pyfuncitem.config).run(
            pyfuncitem, fn, kwargs, world_size(pyfuncitem), launch.directory
        )
        launch.failed = outcome.raised
    name_trace(pyfuncitem, directory, [outcome])
    for text, stream in ((outcome.stdout, sys.stdout), (outcome.stderr, sys.stderr)):
        if text and pyfuncitem.config.getoption("capture") != "no":
            stream.write(text)
    if outcome.rendering is not None:
        pyfuncitem.stash[_rendering_key] = outcome.rendering
    settle([outcome])
    return True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failure in the SPMD worker is reported as pytest rendered it there."""
    report = yield
    rendering = item.stash.get(_rendering_key, None)
    if call.when == "call" and report.failed and rendering is not None:
        report.longrepr = rendering
    return report


def pytest_runtest_setup(item: pytest.Item) -> None:
    if "xla_mesh" in getattr(item, "fixturenames", ()) and not wants_spmd(item):
        pytest.fail(
            f"{item.nodeid} asks for xla_mesh but is not marked @pytest.mark.xla(spmd=True): a "
            "mesh needs SPMD, which only such a test's body has",
            pytrace=False,
        )


@pytest.fixture(scope="session")  # session: Hypothesis refuses function-scoped fixtures
def xla_mesh(pytestconfig: pytest.Config) -> MeshPlaceholder:
    """The 1-D mesh over the SPMD world's devices, axis "data" (`xs.get_1d_mesh("data")`),
    built afresh in the worker for each test.

    Only for `@pytest.mark.xla(spmd=True)` tests, whose body runs where SPMD is on.
    """
    executor(pytestconfig)  # wakes the plugin up if nothing else did
    return MeshPlaceholder()
