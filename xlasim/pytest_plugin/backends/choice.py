"""When the plugin wakes up, choosing the backend and turning emulation on.

The plugin is installed into an environment, so pytest loads it for every run there, XLA or
not. It stays dormant (no torch_xla import, no worker process, no header line, no Hypothesis
profile) until the session asks for XLA:

- by a setting: an `--xla-*` option, an `xla_*` ini key or an `XLASIM_*` variable. Then it
  activates in `pytest_load_initial_conftests`, before any conftest.py is imported, so a
  conftest that imports torch_xla (or even uses a device) finds the emulated slice set up.
- by collecting a test that needs it: marked `xla`, `xla_timeout`, `xla_metrics` or
  `xla_min_devices`, or using the `xla_rank`, `xla_world` or `xla_metrics` fixture. Then it
  activates at the end of
  collection; if a conftest started the XLA runtime with another device count by then, the
  error says to ask with an option instead. A slice a conftest chose itself with
  `xlasim.emulate` is the session's (nothing else asked for one).

An xdist controller runs no tests, so it does not start a world of its own (and skips the
torch_xla import that would delay every worker's start).

The backend is the `pytest_xlasim_choose_backend` hook's answer (`hookspecs`): a plugin may
decide it; xlasim's own answer comes last (`auto`: native on a real accelerator).

Multi-process topologies (`--xla-processes`, `--xla-hosts`, `--xla-topology`) put the ranks in
worker processes of the core's world; the pytest process keeps the rendezvous and the tests.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

from .. import hookspecs
from ..options.settings import asked_by
from ..session import activate, is_active, needs_xla, start, woken_by_key
from .hardware import tpu_attached


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


@pytest.hookimpl(trylast=True)
def pytest_xlasim_choose_backend(config: pytest.Config, asked: str) -> str:
    """The asked backend; `auto` is native on a real accelerator (PJRT_DEVICE other than CPU,
    or a TPU attached), emulated otherwise."""
    if asked != "auto":
        return asked
    platform = os.environ.get("PJRT_DEVICE", "")
    if platform:
        return "emulated" if platform.upper().startswith("CPU") else "native"
    return "native" if tpu_attached() else "emulated"


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    if asked_by(early_config) is not None:
        activate(early_config)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Wake up for the first collected test that needs XLA (when no setting asked before)."""
    config = session.config
    if is_active(config) or config.option.collectonly:
        return
    test = next((item for item in session.items if needs_xla(item)), None)
    if test is None:
        return
    config.stash[woken_by_key] = test.nodeid
    activate(config)
    start(session)


@pytest.hookimpl(wrapper=True)  # after pytest's header: the start counts in the session's time
def pytest_sessionstart(session: pytest.Session) -> Generator[None, None, None]:
    yield
    if is_active(session.config):
        start(session)
