"""This machine's ranks of a pod: its share of the slice's worker processes, and the run
failures it passes to and takes from the other machines.

The world on every machine dispatches each launch to its own ranks only; the others are marked
remote in the launch's `Run`, which meets them through `PodMeetings`. A launch that fails here
(a rank raised, calls did not match, a rank hung) is published for the others, whose supervisors
look for such notices at every poll and stop their share of the launch naming this machine.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from ..base.errors import MachineLostError, WorldAbortedError, XlasimError
from ..base.topology import Topology
from ..emulation.rendezvous import Run
from ..races import records
from ..ranks.processes import ProcessRanks
from ..reports.rank_outcome import RankOutcome
from . import results
from .join import join
from .link import PodLink
from .meeting import PodMeetings
from .membership import PodSettings

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
        """Start this machine's ranks of a launch; the others' are marked remote on `run`, met
        through the pod's link.

        Args:
            run: the launch's shared state on this machine.
            jobs: every global rank's `(function, args, kwargs)`, indexed by rank.
        """
        self._launch = next(self._launches)
        mine = self.settings.ranks_of(self.topology, self.settings.machine_rank)
        remote = [rank for rank in range(len(jobs)) if rank not in mine]
        run.mark_remote(remote, PodMeetings(self._link, self._launch))
        super().dispatch(run, jobs)

    def check(self, run: Run) -> None:
        super().check(run)
        for machine, notice in self._link.failures(self._launch).items():
            run.abort(self._link.failed(machine, notice))

    def finished(self, run: Run) -> None:
        super().finished(run)
        if run.abort_cause is None:
            self._share_results(run)
        self._publish_failure(run)
        if run.syncs is not None:
            self._share_records(run)

    def _publish_failure(self, run: Run) -> None:
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

    def _share_records(self, run: Run) -> None:
        """Every machine's ranks' synchronisations and file accesses into every machine's run
        (`races.records`), so race detection sees the whole pod, naming each access's machine.
        A failed launch shares them too (its races are reported with its failure as the
        cause); when a machine is lost or silent, detection does not run on a part of the pod
        (its clocks would miss the other machines' collectives) and the error says so."""
        assert run.syncs is not None
        me = self.settings.machine_rank
        mine = [r for r in self.settings.ranks_of(self.topology, me) if r < run.size]
        others = [m for m in range(self.settings.machines) if m != me]
        own = {
            rank: records.RankRecords(
                run.syncs.syncs[rank],
                run.outcomes[rank].accesses if run.outcomes[rank] is not None else None,
                run.outcomes[rank].unrecorded if run.outcomes[rank] is not None else None,
            )
            for rank in mine
        }
        try:
            if self._link.lost:
                raise XlasimError(f"{self._link.describe(min(self._link.lost))} was lost")
            received = self._link.exchange(
                f"{self._launch}/races",
                records.encode(own),
                others,
                lambda: None,
                what="with its ranks' file accesses",
            )
        except XlasimError as error:
            run.syncs = None
            note = f"xlasim: race detection did not run: not every machine's records came ({error})"
            if run.abort_cause is not None:
                run.abort_cause.add_note(note)
            else:
                run.abort(XlasimError(note))
            return
        every = {me: own, **{m: records.decode(raw) for m, raw in received.items()}}
        for machine, recorded in every.items():
            for rank, record in recorded.items():
                run.syncs.syncs[rank] = record.syncs
                outcome = run.outcomes[rank]
                if outcome is None:
                    continue
                outcome.accesses = records.on_machines(record.accesses, machine)
                outcome.unrecorded = record.unrecorded

    def _share_results(self, run: Run) -> None:
        """Every machine's ranks' results into every machine's outcomes (`results`): the
        launch's caller runs on each machine. A machine that failed instead, or never answers,
        aborts the run naming it."""
        me = self.settings.machine_rank
        mine = [r for r in self.settings.ranks_of(self.topology, me) if r < run.size]
        others = [m for m in range(self.settings.machines) if m != me]
        try:
            received = self._link.exchange(
                f"{self._launch}/results",
                results.encode({r: run.outcomes[r].result for r in mine}),  # type: ignore[union-attr]
                others,
                self._failure_notice,
                what="with its ranks' results",
            )
            for machine, message in received.items():
                for rank, result in results.decode(message, machine).items():
                    run.outcomes[rank] = RankOutcome(rank, run.size, result=result)
        except WorldAbortedError as released:  # another machine said it failed
            run.abort(released.cause)  # type: ignore[arg-type]
        except XlasimError as error:  # lost, silent, or sent what is not results
            run.abort(error)

    def _failure_notice(self) -> MachineLostError | None:
        """The first failure another machine published about this launch, as its error."""
        for machine, notice in self._link.failures(self._launch).items():
            return self._link.failed(machine, notice)
        return None

    def agree(self, topic: str, text: str, timeout: float) -> dict[int, str]:
        """What every other machine says about `topic` when this one says `text` (a check
        that the machines are about to do the same thing, such as run the same tests).

        Args:
            topic: the question, the same on every machine.
            text: this machine's answer.
            timeout: how long to wait for the slowest machine's answer (seconds).
        """
        me = self.settings.machine_rank
        received = self._link.exchange(
            f"agree/{topic}",
            text.encode(),
            [m for m in range(self.settings.machines) if m != me],
            lambda: None,
            timeout=timeout,
            what=f"about {topic}",
        )
        return {machine: raw.decode(errors="replace") for machine, raw in received.items()}

    def _where(self, rank: int) -> tuple[str, str]:
        machine = self.settings.machine_of(self.topology, rank)
        if machine != self.settings.machine_rank:
            return (f"<on {self._link.describe(machine)}>", "    (a rank of another machine)\n")
        return super()._where(rank)

    def close(self) -> list[int]:
        stuck = super().close()
        self._link.leave()
        return stuck
