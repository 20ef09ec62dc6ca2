"""The SPMD worker: a process of its own where `xr.use_spmd()` is on over the slice's devices.

SPMD cannot be turned off once on, so `@pytest.mark.xla(spmd=True)` tests never run in the
pytest process or in a rank's process: they run here, one at a time. The process is forked
from the zygote the isolated rank workers come from (torch and torch_xla imported, no XLA
runtime started), takes the pytest process's environment and import path, gives its XLA CPU
client every device of the slice (`CPU_NUM_DEVICES`), puts on the slice's TPU identity
(`xlasim.emulation.queries`), turns SPMD on, and then serves tests: each arrives as a `remote.RemoteJob` (the
test function and its fixture values, pickled in the parent) and leaves as the core's
`RankOutcome`, failure rendered here as pytest renders it. `@given` tests draw here, under
the session's Hypothesis profile. Natively it keeps the environment
it was given (the real device) and puts on no identity.
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from ...base.topology import Topology
from ...reports.rank_outcome import Collect, call
from ..remote import jobs as remote
from ..remote import rank_side


@dataclass(frozen=True)
class SpmdSpec:
    """What an SPMD worker needs to start."""

    #: Devices of the SPMD world (the runtime's device count).
    devices: int
    #: The emulated slice whose identity the devices carry; None natively.
    topology: Topology | None
    environment: dict[str, str]
    sys_path: list[str]
    cwd: str
    #: The session's Hypothesis profile (name, settings), if it uses Hypothesis: loaded here
    #: before any test module is imported, since `@given` tests take their settings then.
    hypothesis_profile: tuple[str, Any] | None = None


def main(spec: SpmdSpec, control: Connection, flush_control: Connection) -> None:
    """Entry point: set the SPMD world up, say how many devices it has, then run jobs (each
    recorded into the trace directory it comes with, if any; `flush_control` has what was
    recorded written out while a test hangs).

    Args:
        spec: the world to set up: device count, slice identity, the parent's environment,
            import path, working directory and Hypothesis profile.
        control: the connection to the pytest process: "ready" out, then jobs in and outcomes
            out until a message other than a job (or a closed connection) ends the worker.
        flush_control: a connection of its own on which the pytest process asks for the
            recorded events and coverage data to be written out (served by another thread,
            so a hung test does not block it).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the pytest process owns Ctrl-C
    from ...emulation import spmd
    from ...events import flushing, hooks
    from ...ranks import launch_reset, rank_coverage
    from ...reports import rank_output

    launch_reset.restore_environment(spec.environment)
    for path in reversed(spec.sys_path):
        if path not in sys.path:
            sys.path.insert(0, path)
    os.chdir(spec.cwd)
    if spec.hypothesis_profile is not None:
        from hypothesis import settings

        name, chosen = spec.hypothesis_profile
        settings.register_profile(name, chosen)
        settings.load_profile(name)
    rank_output.install()
    flushing.serve(flush_control, also=rank_coverage.save)  # a hung test's lines count too
    control.send(("ready", spmd.start_world(spec.topology, spec.devices)))
    while True:
        try:
            message = control.recv()
        except (EOFError, OSError):  # the pytest process is gone
            return
        if message[0] != "job":
            rank_coverage.save()  # told to stop: what it measured, before its process ends
            return
        job: remote.RemoteJob = message[1]
        collect: Collect = message[2]
        hooks.follow(str(message[3]) if message[3] is not None else None)
        rank_coverage.follow(*message[4])  # measured as the pytest process is, if it is
        outcome = call(0, 1, rank_side.run_job, (job,), {}, collect)
        control.send(outcome.portable())
