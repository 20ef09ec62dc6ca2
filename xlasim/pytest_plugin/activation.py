"""Choosing the backend and turning emulation on before any conftest.py can start torch_xla.

The plugin is loaded from its entry point before conftest files are imported, and
`pytest_load_initial_conftests` runs before they are: the device count is chosen there, so a
conftest that imports torch_xla (or even uses a device) finds the emulated slice already set up.
An xdist controller runs no tests, so it does not start a world of its own (and skips the
torch_xla import that would delay every worker's start).

Multi-process topologies (`--xla-processes`, `--xla-hosts`, `--xla-topology`) put the ranks in
worker processes of the core's world; the pytest process keeps the rendezvous and the tests.
"""

from __future__ import annotations

import glob
import os
import pathlib
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from .. import activation as core
from ..errors import XlasimError
from .executor import Executor
from .options import Settings, resolve
from .outcomes import RankOutcome, replay_output

_GOOGLE_PCI_VENDOR = "0x1ae0"
backend_key = pytest.StashKey[str]()
executor_key = pytest.StashKey[Executor]()


def _tpu_attached() -> bool:
    """A TPU chip on the PCI bus (torch_xla's own test, asked only if any Google device is there)."""
    vendors = glob.glob("/sys/bus/pci/devices/*/vendor")
    if not any(pathlib.Path(v).read_text().strip() == _GOOGLE_PCI_VENDOR for v in vendors):
        return False
    from torch_xla._internal import tpu

    return tpu.num_available_chips() > 0


def choose_backend(asked: str) -> str:
    """`auto` is native on a real accelerator (PJRT_DEVICE other than CPU, or a TPU attached)."""
    if asked != "auto":
        return asked
    platform = os.environ.get("PJRT_DEVICE", "")
    if platform:
        return "emulated" if platform.upper().startswith("CPU") else "native"
    return "native" if _tpu_attached() else "emulated"


def is_xdist_controller(config: pytest.Config) -> bool:
    workers = getattr(config.known_args_namespace, "numprocesses", None)
    return bool(workers) and "PYTEST_XDIST_WORKER" not in os.environ


def emulated_devices(settings: Settings) -> int:
    return settings.slice().devices


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    settings = resolve(early_config)
    backend = early_config.stash[backend_key] = choose_backend(settings.backend)
    if backend == "native" and settings.topology_on_command_line:
        raise pytest.UsageError(
            "xlasim: --xla-processes, --xla-hosts and --xla-topology shape the emulated slice; "
            "the native backend runs the slice it finds (xmp.spawn's own processes)"
        )
    if backend == "emulated" and not is_xdist_controller(early_config):
        wanted = settings.slice()
        try:
            if settings.topology:
                core.emulate(topology=settings.topology)
            else:
                core.emulate(devices=wanted.devices, processes=wanted.processes, hosts=wanted.hosts)
        except XlasimError as error:
            raise pytest.UsageError(f"xlasim: {error}") from None


def pytest_sessionstart(session: pytest.Session) -> None:
    # Ranks (threads, worker processes or xmp.spawn's workers) are started before the first
    # test, not inside it; a session that only collects starts none.
    if not is_xdist_controller(session.config) and not session.config.option.collectonly:
        executor(session.config).start()


def executor(config: pytest.Config) -> Executor:
    """The session's executor, made on first use (the native one starts worker processes)."""
    if executor_key not in config.stash:
        if config.stash[backend_key] == "emulated":
            from .emulated import EmulatedExecutor

            config.stash[executor_key] = EmulatedExecutor()
            config.add_cleanup(config.stash[executor_key].close)
        else:
            from .native import NativeExecutor

            config.stash[executor_key] = NativeExecutor(resolve(config))
            config.add_cleanup(config.stash[executor_key].close)
    return config.stash[executor_key]


def run_ranks(
    config: pytest.Config,
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    *,
    size: int,
    timeout: float,
    item: pytest.Item | None = None,
) -> list[RankOutcome]:
    """Run on the session's executor. Ranks' output is shown live under `pytest -s`; otherwise
    the output of ranks that did not fail is handed to pytest's capture, tagged by rank.
    `item` is the running test: ranks in other processes render their failures as it would."""
    from .remote import FailureStyle

    live = config.getoption("capture") == "no"
    outcomes = executor(config).run_ranks(
        fn, args, kwargs, size=size, timeout=timeout, tee=live, style=FailureStyle.of(item)
    )
    if not live:
        replay_output(outcomes)
    return outcomes
