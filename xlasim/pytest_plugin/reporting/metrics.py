"""XLA performance lint: bound graph compilations and CPU fallbacks inside a test.

Recompiling graphs (a shape that changes every step, Python control flow on tensor values) and
ops XLA cannot lower (run on the CPU through `aten::` fallbacks) are the usual reasons a model
that is correct on CPU is slow on a TPU. Both show in torch_xla's metrics counters, which work
the same on the CPU device, so CI can catch them:

    @pytest.mark.xla_metrics(compilations=2, fallbacks=0)   # checked around the test call

    def test_steady(xla_world, xla_metrics):                  # or by hand, in phases
        xla_world.run(train_step)                             # warm-up compiles
        xla_metrics.reset()
        xla_world.run(train_step)
        xla_metrics.check(compilations=0, fallbacks=0)

The counts are process-wide, and emulated ranks are threads of one process, so they are per
test, taken over the whole world:
- compilations: the growth of torch_xla's compilation cache, i.e. distinct graphs compiled. A
  graph every rank compiles counts once, as it does in each process of a TPU slice (the raw
  "UncachedCompile" counter would count it between 1 and R times, depending on thread timing).
  Ranks that compile different graphs add up, which bounds the rank that compiles most.
- fallbacks: `aten::` counters, which count every call on every rank; on a `@pytest.mark.xla`
  test the marker's bound is per rank (the sum over R ranks must stay within R x the bound),
  exact for the usual `fallbacks=0`.

Ranks in other processes (multi-process topologies, the native backend's workers) count in
their own process; each run's growth comes back with the ranks' replies and is added to what
the fixture and marker see (the session's `SessionCounts`, held by its executor).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Generator

import pytest

from ...reports.xla_counters import COMPILED_GRAPHS, FALLBACK_PREFIX
from ..options.world_sizes import world_size
from ..session import executor
from .outcomes import outcomes_key
from .session_counts import SessionCounts


class XlaMetricsError(AssertionError):
    """A test compiled more graphs or fell back to the CPU more often than its bound allows."""


class XlaMetrics:
    """Compilations and CPU fallbacks since the fixture was set up (or since `reset()`)."""

    def __init__(self, counts: SessionCounts) -> None:
        self._counts = counts
        self._base = counts.totals()

    def reset(self) -> None:
        """Start counting from now (e.g. after a warm-up step that is expected to compile)."""
        self._base = self._counts.totals()

    def _delta(self) -> Counter[str]:
        now = self._counts.totals()
        now.subtract(self._base)
        return +now

    @property
    def compilations(self) -> int:
        """Distinct graphs compiled (growth of the compilation cache) by the whole process."""
        return self._delta()[COMPILED_GRAPHS]

    @property
    def fallbacks(self) -> dict[str, int]:
        """Ops that ran on the CPU instead of XLA, e.g. `{"aten::nonzero": 8}`."""
        return {k: v for k, v in self._delta().items() if k.startswith(FALLBACK_PREFIX)}

    def check(
        self, *, compilations: int | None = None, fallbacks: int | None = None, ranks: int = 1
    ) -> None:
        """Raise `XlaMetricsError` when a count exceeds its bound (`fallbacks` times `ranks`).

        Args:
            compilations: most graphs the process may have compiled since the fixture was set
                up (or reset); None bounds nothing.
            fallbacks: most CPU fallback ops per rank over the same span; None bounds nothing.
            ranks: how many ranks' work the counts hold (the session's counters add up every
                rank's), the factor on `fallbacks`.
        """
        __tracebackhide__ = True  # the failure points at the caller's check, not in here
        check_counts(self._delta(), compilations=compilations, fallbacks=fallbacks, ranks=ranks)

    def __repr__(self) -> str:
        return f"<xla_metrics compilations={self.compilations} fallbacks={self.fallbacks}>"


def check_counts(
    delta: Counter[str],
    *,
    compilations: int | None = None,
    fallbacks: int | None = None,
    ranks: int = 1,
) -> None:
    """Raise `XlaMetricsError` naming every bound that `delta` exceeds.

    Args:
        delta: the growth of the XLA counters to check, by counter name (compiled graphs,
            `aten::` fallbacks).
        compilations: most graphs `delta` may show compiled; None bounds nothing.
        fallbacks: most CPU fallback ops per rank; None bounds nothing.
        ranks: how many ranks' work `delta` holds, the factor on `fallbacks`.
    """
    __tracebackhide__ = True
    problems = []
    if compilations is not None and delta[COMPILED_GRAPHS] > compilations:
        problems.append(
            f"{delta[COMPILED_GRAPHS]} graphs compiled, bound {compilations} (shapes that change "
            "between steps, or Python branching on tensor values, make XLA compile again)"
        )
    fallen = {k: v for k, v in delta.items() if k.startswith(FALLBACK_PREFIX) and v}
    if fallbacks is not None and sum(fallen.values()) > fallbacks * ranks:
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(fallen.items()))
        problems.append(
            f"{sum(fallen.values())} CPU fallbacks ({ops}), bound {fallbacks}"
            + (f" per rank x {ranks} ranks" if ranks > 1 else "")
            + " (these ops have no XLA lowering and copy data to the host and back)"
        )
    if problems:
        raise XlaMetricsError("XLA performance bound exceeded: " + "; ".join(problems))


@pytest.fixture
def xla_metrics(request: pytest.FixtureRequest) -> XlaMetrics:
    """Counts XLA graph compilations and CPU fallbacks from here on; `check(...)` bounds them."""
    return XlaMetrics(executor(request.config).counts)


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Generator[None, object, object]:
    marker = pyfuncitem.get_closest_marker("xla_metrics")
    if marker is None:
        return (yield)
    per_rank = pyfuncitem.get_closest_marker("xla") is not None
    probe = XlaMetrics(executor(pyfuncitem.config).counts)
    result = yield
    outcomes = pyfuncitem.stash.get(outcomes_key, [])
    try:
        if per_rank and outcomes and all(o.metrics is not None for o in outcomes):
            for o in outcomes:  # worker processes: each rank counted on its own
                check_counts(Counter(o.metrics), **marker.kwargs)
        else:
            probe.check(**marker.kwargs, ranks=world_size(pyfuncitem) if per_rank else 1)
    except XlaMetricsError as error:
        exceeded = str(error)
    else:
        return result
    pytest.fail(f"@pytest.mark.xla_metrics: {exceeded}", pytrace=False)
