"""The plugin's markers, and the check of their arguments at collection.

- `xla(devices=None, min_devices=None, timeout=None, spmd=False)`: the test body runs on every
  rank (`ranks`), or with `spmd=True` once, in an SPMD world over the slice (`spmd`); `devices`
  fixes the world's size, `min_devices` is the least it may be;
- `xla_min_devices(N)`: a test that is not per-rank (it drives `xla_world`, or builds its own
  world) needs at least N cores in the session (`ranks`);
- `xla_timeout(SECONDS)`: the bound on the test's runs (`timeouts`);
- `xla_metrics(compilations=None, fallbacks=None)`: the performance lint (`metrics`).

A marker takes any arguments at all, so a misspelt one (`device=4`, `devcies=[1, 2]`) or one
given by position would silently change nothing: the test would run on every core with the
session's timeout. Every collected test's markers are checked before anything runs; the
problems are one usage error that names each test and says what the markers accept.
"""

from __future__ import annotations

import pytest

from .marker_args import ACCEPTS, KEYWORDS, problems, written


def pytest_configure(config: pytest.Config) -> None:
    for line in (
        "xla(devices=None, min_devices=None, timeout=None, spmd=False): run the test body on "
        "every rank of the emulated (or real) slice; devices=N for a sub-world of N cores, "
        "devices=[1, 2, 8] to parametrize over sizes; min_devices=N runs on every core and skips "
        "(with the reason) a session of fewer; timeout=SECONDS bounds the test's runs (instead "
        "of --xla-timeout); spmd=True runs the body once, in a process of its own with "
        "xr.use_spmd() on over the slice's devices (or devices=N of them)",
        "xla_min_devices(n): this test (one that drives xla_world, or builds its own world) "
        "needs at least n XLA cores in the session; skipped, with the reason, below that",
        "xla_timeout(seconds): bound on each per-rank run of this test (overrides --xla-timeout)",
        "xla_metrics(compilations=None, fallbacks=None): fail the test when the test call "
        "compiles more distinct XLA graphs, or runs more aten:: CPU fallbacks (per rank on xla "
        "tests), than allowed",
    ):
        config.addinivalue_line("markers", line)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    reported: dict[str, None] = {}
    names: dict[str, None] = {}
    for item in items:
        test = item.nodeid.partition("[")[0]  # one line per test function, not per parameter
        for name in KEYWORDS:
            for mark in item.iter_markers(name):
                for problem in problems(mark):
                    reported[f"  {test}: {written(mark)}: {problem}"] = None
                    names[name] = None
    if reported:
        accepted = [f"@pytest.mark.{name} accepts {ACCEPTS[name]}" for name in names]
        raise pytest.UsageError("\n".join(["xlasim: bad marker arguments:", *reported, *accepted]))
