"""What the machines of a pod name in machine 0's rendezvous store, and the token's proofs.

The store has no access control: any host that reaches it reads and writes every key it can
name, but it cannot list them. So only the join's keys are public (the challenge, machine 0's
proof, the tickets and the claims written on them); every key a member acts on once it has
proved the token (the verdicts, the gloo group's registrations, failure notices, mailboxes,
leaving) lives under the pod's space, the token's HMAC of the challenge, which a host without
the token cannot compute. No torch here.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

CHALLENGE_KEY = "pod/challenge"
HOST_PROOF_KEY = "pod/host-proof"
TICKETS_KEY = "pod/tickets"


def proof(token: str, challenge: str, what: str) -> str:
    """What a machine shows for `what` (a ticket and rank, or machine 0's "host"): the token's
    HMAC-SHA256 of the challenge and `what`, which tells nothing about the token.

    Args:
        token: the pod's token.
        challenge: machine 0's random challenge for this pod.
        what: what the proof is of.
    """
    message = f"{challenge}/{what}".encode()
    return hmac.new(token.encode(), message, hashlib.sha256).hexdigest()


def claim_key(ticket: int) -> str:
    """Where the joiner holding `ticket` writes its machine rank and proof (public)."""
    return f"pod/ticket/{ticket}"


@dataclass(frozen=True)
class PodKeys:
    """The keys of one pod's members, under its space (see the module's docstring)."""

    space: str

    @classmethod
    def of(cls, token: str, challenge: str) -> PodKeys:
        """The keys of the pod whose machine 0 published `challenge`, as holders of `token`
        name them (a proof of "keys": no machine ever publishes that one).

        Args:
            token: the pod's shared secret, as every machine was given it.
            challenge: the random text machine 0 published in the rendezvous store.
        """
        return cls(f"pod/{proof(token, challenge, 'keys')}")

    def verdict(self, ticket: int) -> str:
        """Machine 0's verdict on the claim of `ticket`."""
        return f"{self.space}/verdict/{ticket}"

    @property
    def seated(self) -> str:
        """Set by machine 0 once every machine rank holds a seat."""
        return f"{self.space}/seated"

    @property
    def gloo(self) -> str:
        """The prefix of the gloo group's registrations."""
        return f"{self.space}/gloo"

    def failure(self, launch: int, machine: int) -> str:
        """Where `machine` says why its share of launch `launch` failed.

        Args:
            launch: the launch's number, counted alike on every machine of the pod.
            machine: the machine rank that failed.
        """
        return f"{self.space}/launch/{launch}/failed/{machine}"

    def mailbox(self, launch: int, channel: str) -> str:
        """The pod's mailbox of a point-to-point `channel` (its text) in launch `launch`.

        Args:
            launch: the launch's number, counted alike on every machine of the pod.
            channel: the channel's key as text (an `xm.send` channel id, or the process
                group's sender, receiver and tag).
        """
        return f"{self.space}/launch/{launch}/mailbox/{channel}"

    def left(self, machine: int) -> str:
        """Set by `machine` when it is done with the pod."""
        return f"{self.space}/left/{machine}"
