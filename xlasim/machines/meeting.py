"""A launch's collectives whose ranks span machines, completed on every machine alike.

When this machine's participants of a collective have met (`Run.gather`), their calls and
payloads go to every other machine with participants, and theirs come back: each machine then
holds every participant's call and payload, checks that the calls match (the same check as
within one machine, each rank named with its machine) and combines in global rank order, so
every machine computes the bits one machine would.
"""

from __future__ import annotations

from typing import Any

from ..base.errors import MachineLostError, WorldAbortedError, XlasimError
from ..emulation.rendezvous import mismatch
from . import wire
from .link import PodLink


class Meetings:
    """Launch `launch`'s meetings with other machines: a `Run`'s `machines`."""

    def __init__(self, link: PodLink, launch: int):
        self.link = link
        self.launch = launch

    def meet(self, run: Any, key: tuple, arrivals: dict[int, tuple[Any, Any]]) -> dict:
        """Every participant's `(call, payload)` of the collective `key` (participants,
        sequence), this machine's `arrivals` among them; aborts `run` when machines are lost or
        the calls do not match.

        Args:
            run: the launch's `Run` (its abort releases the wait).
            key: the collective's participants and how many they did before, as `Run` keys it.
            arrivals: this machine's participants' calls and payloads, by rank.
        """
        participants, sequence = key
        settings, topology = self.link.settings, self.link.topology
        me = settings.machine_rank
        machines = {r: settings.machine_of(topology, r) for r in participants}
        peers = sorted(set(machines.values()) - {me})
        try:
            received = self.link.exchange(
                f"{self.launch}/{list(participants)}/{sequence}",
                wire.encode(arrivals),
                peers,
                lambda: run.abort_cause,
            )
            everyone = {r: (wire.MachineCall.of(c, me), p) for r, (c, p) in arrivals.items()}
            for machine, message in received.items():
                theirs = wire.decode(message, machine)
                expected = sorted(r for r, m in machines.items() if m == machine)
                if sorted(theirs) != expected:
                    raise XlasimError(
                        f"{self.link.describe(machine)} sent ranks {sorted(theirs)} for a "
                        f"collective of ranks {expected} of it"
                    )
                everyone.update(theirs)
        except WorldAbortedError:
            raise
        except XlasimError as error:
            if isinstance(error, MachineLostError) and error.machine is not None:
                # It may have said why before it went.
                notice = self.link.failures(self.launch).get(error.machine)
                error = error if notice is None else self.link.failed(error.machine, notice)
            run.abort(error)
            raise WorldAbortedError(error) from error
        self._check_calls(run, participants, everyone)
        return everyone

    @staticmethod
    def _check_calls(run: Any, participants: tuple[int, ...], everyone: dict) -> None:
        error = mismatch(participants, {rank: call for rank, (call, _) in everyone.items()})
        if error is not None:
            run.abort(error)
            raise WorldAbortedError(error) from error
