"""`@pytest.mark.xla`: the test body runs on every rank, and the ranks make one test result.

Fixtures and `parametrize` values are resolved once, in the parent, and the same objects are
handed to every rank (as `xmp.spawn` args are); only `xla_rank` differs per rank.
`devices=N` runs on the first N cores, `devices=[...]` parametrizes over world sizes,
`min_devices=N` runs on every core of a session that has at least N; a size the session does
not have is skipped at the end of collection with a reason, as is a test marked
`xla_min_devices(N)` (one that drives `xla_world` itself) in a session of fewer cores. The
skips are tallied by reason for the header (`reporting`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from ...base.errors import XlasimError
from ..options import marker_args
from ..options.timeouts import timeout_for
from ..options.world_sizes import SIZE_PARAM, size_skip, size_skips_key, world_size
from ..remote.jobs import NotPicklableError
from ..reporting.outcomes import outcomes_key, settle
from ..session import executor, is_active, is_xdist_controller, run_ranks
from .rank_debugging import test_body
from .rank_fixtures import OnRank, for_ranks, made


@pytest.fixture(autouse=True)
def _xla_world_size(request: pytest.FixtureRequest) -> int | None:
    """Carries the world size a `devices=[...]` test was parametrized with (None otherwise)."""
    return getattr(request, "param", None)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("xla")
    if not marker_args.checked(marker):  # a bad marker stops the collection (`markers`)
        return
    devices = marker_args.devices(marker)  # type: ignore[arg-type]
    if isinstance(devices, list):
        ids = [f"{n}dev" for n in devices]
        metafunc.parametrize(SIZE_PARAM, devices, indirect=True, ids=ids)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Skip the sizes this session lacks (after `activation`, which may wake up only now)."""
    config = session.config
    if not is_active(config) or is_xdist_controller(config):
        return
    run = executor(config)
    tally: dict[str, int] = {}
    for item in session.items:
        if any(mark.name == "skip" for mark in item.iter_markers()):
            continue  # skipped already (a conftest's reason, or another of ours): not for size
        found = size_skip(item, run.size, run.sub_worlds, run.name)
        if found is None:
            continue
        key, reason = found
        tally[key] = tally.get(key, 0) + 1
        item.add_marker(pytest.mark.skip(reason=reason))
    config.stash[size_skips_key] = tally


def call_test(
    fn: Callable[..., Any], kwargs: dict[str, Any], others: Sequence[OnRank] = ()
) -> None:
    """What each rank runs: the test function, with `xla_rank` and the fixtures made on ranks
    (`rank_fixtures`) made for this rank.

    Args:
        fn: the test function (its body, possibly wrapped for `--trace`).
        kwargs: its arguments as the parent resolved them, stand-ins included
            (`rank_fixtures.for_ranks`).
        others: rank fixtures the test does not take but that are made on every rank too
            (autouse, or needed by another fixture).
    """
    with made(kwargs, others) as values:
        fn(**values)


def _what_did_not_pickle(
    item: pytest.Function, kwargs: dict[str, Any], error: NotPicklableError
) -> str:
    """Name the fixture (or the test itself) that cannot be sent to ranks in other processes."""
    import pickle

    where = str(error).partition(", so ")[0]
    for name, value in kwargs.items():
        try:
            pickle.dumps(value)
        except Exception as cause:
            return (
                f"fixture {name!r} ({type(value).__name__}) cannot be sent to the ranks: {where}, "
                "so a @pytest.mark.xla test's fixture values are resolved here and pickled to "
                "them, as xmp.spawn's arguments are on a TPU VM ("
                f"{type(cause).__name__}: {cause}). Return picklable data from the fixture and "
                "build the rest inside the test body."
            )
    return (
        f"{item.name} cannot be sent to the ranks: {where}, so the test function (and its class "
        f"instance, for a method) is pickled to them ({type(error.cause).__name__}: "
        f"{error.cause}). Define it at module level."
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Refuse @given on a per-rank test before anything else looks at it (Hypothesis' own
    health check would complain first about the function-scoped `xla_rank` fixture)."""
    marker = item.get_closest_marker("xla")
    marked = marker is not None and not marker.kwargs.get("spmd")  # SPMD bodies run once
    if marked and getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
        pytest.fail(
            "@pytest.mark.xla cannot be combined with Hypothesis' @given: each rank would draw "
            "its own examples. Leave the test unmarked and call xla_world.run(fn, example) from "
            "it, so every rank gets the example drawn in the parent.",
            pytrace=False,
        )


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if pyfuncitem.get_closest_marker("xla") is None:
        return None
    fn = test_body(pyfuncitem)  # under --trace, started under pdb on the ranks
    argnames = pyfuncitem._fixtureinfo.argnames
    kwargs, others = for_ranks(pyfuncitem, pyfuncitem.funcargs, argnames)
    try:
        outcomes = run_ranks(
            pyfuncitem.config,
            call_test,
            (fn, kwargs, others),
            {},
            size=world_size(pyfuncitem),
            timeout=timeout_for(pyfuncitem),
            item=pyfuncitem,
        )
    except NotPicklableError as error:
        sent = {**kwargs, **{fixture.name: fixture for fixture in others}}
        raise XlasimError(_what_did_not_pickle(pyfuncitem, sent, error)) from None
    pyfuncitem.stash[outcomes_key] = outcomes
    settle(outcomes)
    return True
