"""A launch's collectives whose ranks span machines, completed on every machine alike.

When this machine's participants of a collective have met (`Run.gather`), their calls and
payloads go to every other machine with participants, and theirs come back: each machine then
holds every participant's call and payload, checks that the calls match (the same check as
within one machine, each rank named with its machine) and combines in global rank order, so
every machine computes the bits one machine would.

Point-to-point messages (`xm.send`/`xm.recv` channels, the `xla` process group's send/recv)
name a channel, not a machine: any rank that receives on a channel takes its oldest message.
On a pod each channel is one mailbox of the pod's, in the rendezvous store (`PodLink.post`,
`take`), so the order is the pod's and a message is taken once, whichever machine takes it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NoReturn

from ..base.errors import CollectiveTimeoutError, MachineLostError, WorldAbortedError, XlasimError
from ..emulation.rendezvous import mismatch
from . import wire
from .link import PodLink


class PodMeetings:
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
            _fail(run, error)
        self._check_calls(run, participants, everyone)
        return everyone

    def post(self, run: Any, rank: int, channel: Any, call: Any, payload: Any) -> None:
        """Rank `rank` (of this machine) sends `payload` on `channel`.

        Args:
            run: the launch's `Run`.
            rank: the sender.
            channel: the channel, as the emulation names it (`("xm", channel_id)`, ...).
            call: the sender's call, for the receiver's reports.
            payload: the tensor sent, on the host.
        """
        try:
            self.link.post(self._mailbox(channel), wire.encode({rank: (call, [payload])}))
        except XlasimError as error:
            _fail(run, error)

    def take(self, run: Any, rank: int, channel: Any, call: Any) -> tuple[Any, Any]:
        """Rank `rank` (of this machine) receives the oldest message of `channel` in the pod:
        the sender's call (naming its machine) and the tensor.

        Args:
            run: the launch's `Run` (its abort releases the wait).
            rank: the receiver.
            channel: the channel, as `post` was given it.
            call: the receiver's call, for a report of a message that never comes.
        """
        try:
            message = self.link.take(self._mailbox(channel), lambda: run.abort_cause)
            ((sender, (sent_by, payload)),) = wire.decode(message, -1).items()
        except WorldAbortedError:
            raise
        except CollectiveTimeoutError as error:
            _fail(
                run,
                CollectiveTimeoutError(f"rank {rank}'s {call.describe()} got no message: {error}"),
            )
        except (XlasimError, ValueError) as error:  # the rendezvous gone, or a malformed message
            _fail(run, error)
        machine = self.link.settings.machine_of(self.link.topology, sender)
        return dataclasses.replace(sent_by, machine=machine), payload[0]

    def _mailbox(self, channel: Any) -> str:
        return self.link.keys.mailbox(self.launch, repr(channel))

    @staticmethod
    def _check_calls(run: Any, participants: tuple[int, ...], everyone: dict) -> None:
        error = mismatch(participants, {rank: call for rank, (call, _) in everyone.items()})
        if error is not None:
            _fail(run, error)


def _fail(run: Any, error: BaseException) -> NoReturn:
    """Abort the launch with `error` and release the calling rank."""
    run.abort(error)
    raise WorldAbortedError(error) from error
