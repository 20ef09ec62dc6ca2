"""Coverage on a pod (docs/pods.md): every machine's report counts what every machine ran.

Each machine of a pod runs its own pytest process, measured by its own coverage.py, and its own
hosts' worker processes, which write their data files beside its own (`rank_coverage.py`), on
that machine: machines share no filesystem. So when the test loop ends, while the pod is still
joined, each measured machine has its workers write their data (`World.flush_records`), reads
what was measured on it (its process's data and its workers' files, combined in memory; the
files stay for its own report), and sends that to every other machine through the pod's link
(`World.agree_across_machines`); what each other machine sent is written as a parallel data
file beside this machine's own (`.coverage.machine<K>.<host>.<pid>...`), which coverage.py
then combines like any other. The report each machine prints is the pod's.

Every machine must be measured alike (the same command on every machine, as a pod needs
anyway); a machine that sends nothing within the bound is named, and the report is then that
machine's share only. The machines' files must sit at the same paths, or be mapped with
coverage.py's `[paths]`, as for any data combined from several machines. What a pytest process
runs after the exchange (pytest's own end) is in its own machine's report only.
"""

from __future__ import annotations

import base64
import sys
from typing import TYPE_CHECKING, Any

from ..base.errors import XlasimError

if TYPE_CHECKING:
    from .world import World

#: The question the machines answer to one another (`World.agree_across_machines`).
TOPIC = "coverage data"


def share_across_machines(world: World, timeout: float) -> None:
    """When coverage.py measures this process: exchange what each machine of `world`'s pod
    measured, and write the others' data beside this machine's (nothing when not measured).

    Args:
        world: this machine's world of the pod.
        timeout: how long the slowest machine may take to send its data (seconds).
    """
    coverage = sys.modules.get("coverage")
    measuring = coverage.Coverage.current() if coverage is not None else None
    if measuring is None:
        return
    world.flush_records()  # the workers' data files, written now
    mine = base64.b64encode(_measured_here(measuring)).decode()
    try:
        theirs = world.agree_across_machines(TOPIC, mine, timeout)
    except XlasimError as error:
        sys.stderr.write(
            f"xlasim: this machine's coverage report holds its own share of the pod only: "
            f"{type(error).__name__}: {error} (measure every machine alike)\n"
        )
        return
    for machine, text in sorted(theirs.items()):
        _write(measuring, machine, base64.b64decode(text))


def _measured_here(measuring: Any) -> bytes:
    """What this machine measured: its process's data and its workers' data files, combined
    in memory and serialized (coverage.py's `dumps`); the files stay for its own report."""
    from coverage import CoverageData
    from coverage.data import combine_parallel_data

    own = measuring.get_data()  # its tracer's data, written to its own data file
    combined = CoverageData(basename=own.base_filename(), no_disk=True)
    combined.update(own)
    combine_parallel_data(combined, keep=True)
    return combined.dumps()


def _write(measuring: Any, machine: int, data: bytes) -> None:
    """`data` from `machine`, as a parallel data file beside this machine's own."""
    from coverage import CoverageData
    from coverage.sqldata import filename_suffix

    base = measuring.get_data().base_filename()
    suffix = f"machine{machine}.{filename_suffix(True)}"
    CoverageData(basename=base, suffix=suffix).loads(data)
