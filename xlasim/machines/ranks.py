"""This machine's ranks of a pod: its share of the slice's worker processes, and the run
failures it passes to and takes from the other machines.

The world on every machine dispatches each launch to its own ranks only; the others are marked
remote in the launch's `Run`, which meets them through `Meetings`. A launch that fails here
(a rank raised, calls did not match, a rank hung) is published for the others, whose supervisors
look for such notices at every poll and stop their share of the launch naming this machine.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from ..base.errors import MachineLostError
from ..base.topology import Topology
from ..emulation.rendezvous import Run
from ..ranks.processes import ProcessRanks
from .join import join
from .link import PodLink
from .meeting import Meetings
from .settings import PodSettings

#: The longest failure text passed to the other machines.
NOTICE_CHARS = 4000


class MachineRanks(ProcessRanks):
    """The worker processes of this machine's hosts, joined to the pod's other machines."""

    def __init__(self, topology: Topology, settings: PodSettings, collective_timeout: float):
        settings.check(topology)
        self.settings = settings
        self._link = PodLink(join(settings, collective_timeout), topology, collective_timeout)
        self._launches = itertools.count()
        self._launch = -1
        super().__init__(topology)

    def local_hosts(self) -> range:
        return self.settings.hosts_of(self.topology, self.settings.machine_rank)

    def dispatch(self, run: Run, jobs: list[tuple[Callable[..., Any], tuple, dict]]) -> None:
        self._launch = next(self._launches)
        mine = self.settings.ranks_of(self.topology, self.settings.machine_rank)
        remote = [rank for rank in range(len(jobs)) if rank not in mine]
        run.mark_remote(remote, Meetings(self._link, self._launch))
        super().dispatch(run, jobs)

    def check(self, run: Run) -> None:
        super().check(run)
        for machine, notice in self._link.failures(self._launch).items():
            run.abort(self._link.failed(machine, notice))

    def finished(self, run: Run) -> None:
        super().finished(run)
        cause = run.abort_cause
        if cause is None or isinstance(cause, MachineLostError):
            return  # nothing to tell, or the others know already
        raised = [o for o in run.outcomes if o is not None and o.raised]
        text = (
            f"rank {raised[0].rank} raised {type(cause).__name__}: {cause}"
            if raised
            else f"{type(cause).__name__}: {cause}"
        )
        self._link.publish_failure(self._launch, text[:NOTICE_CHARS])

    def _where(self, rank: int) -> tuple[str, str]:
        machine = self.settings.machine_of(self.topology, rank)
        if machine != self.settings.machine_rank:
            return (f"<on {self._link.describe(machine)}>", "    (a rank of another machine)\n")
        return super()._where(rank)

    def close(self) -> list[int]:
        stuck = super().close()
        self._link.leave()
        return stuck
