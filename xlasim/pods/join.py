"""How machines form a pod: machine 0's rendezvous store, the token's proofs, the gloo group.

Machine 0 serves a torch.distributed `TCPStore` on the rendezvous address only (TCPStore's own
server would listen on every interface, so it is handed a bound socket). The token itself never
crosses the network: machine 0 publishes a random challenge and its own proof (an HMAC of the
challenge under the token); a joining machine takes a ticket, publishes the proof of its ticket
and machine rank, and checks machine 0's proof. Machine 0 seats each machine rank once, refuses
a wrong proof (on stderr, and the joiner is told why) and, once every seat is taken, says so;
the machines then form one gloo process group, each bound to its own address. Verdicts, the
seating and the group's registrations are keys of the pod's space (`keys.py`), which only
holders of the token can name. Everything read from the store is short text; nothing is
unpickled.
"""

from __future__ import annotations

import hmac
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import torch.distributed as dist

from ..base.errors import PodJoinError
from .keys import CHALLENGE_KEY, HOST_PROOF_KEY, TICKETS_KEY, PodKeys, claim_key, proof
from .membership import PodSettings

ACCEPTED = "accepted"
#: How often machine 0 looks for new tickets while machines join.
POLL_S = 0.05


@dataclass
class Joined:
    """A machine's membership of a formed pod."""

    settings: PodSettings
    store: dist.TCPStore
    group: dist.ProcessGroupGloo
    #: The keys of the pod's members in `store`.
    keys: PodKeys


def join(settings: PodSettings, collective_timeout: float) -> Joined:
    """Form the pod (machine 0) or join it (the others): a bounded wait for every machine,
    then the gloo group whose operations are bounded by `collective_timeout`.

    Args:
        settings: this machine's view of the pod.
        collective_timeout: the bound of every wait between machines once joined (seconds).
    """
    if settings.machine_rank == 0:
        store = _serve(settings)
        challenge = os.urandom(16).hex()
        store.set(CHALLENGE_KEY, challenge)
        store.set(HOST_PROOF_KEY, proof(settings.token, challenge, "host"))
        keys = PodKeys.of(settings.token, challenge)
        _seat_machines(store, settings, challenge, keys)
        store.set(keys.seated, ACCEPTED)
    else:
        store = _connect(settings)
        keys = _ask_to_join(store, settings)
    options = dist.ProcessGroupGloo._Options()
    options._devices = [dist.ProcessGroupGloo.create_device(hostname=settings.address)]
    options._timeout = timedelta(seconds=max(collective_timeout, 1.0))
    prefixed = dist.PrefixStore(keys.gloo, store)
    try:
        with _stdout_to_stderr():  # gloo prints its connection line on stdout, the script's
            group = dist.ProcessGroupGloo(
                prefixed, settings.machine_rank, settings.machines, options
            )
    except RuntimeError as error:
        raise PodJoinError(
            f"machine {settings.machine_rank} could not connect to the pod's other machines "
            f"from {settings.address}: {error}"
        ) from None
    return Joined(settings, store, group, keys)


@contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _serve(settings: PodSettings) -> dist.TCPStore:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((settings.host, settings.port))
        listener.listen(socket.SOMAXCONN)
    except OSError as error:
        listener.close()
        raise PodJoinError(
            f"machine 0 cannot listen on the rendezvous {settings.host}:{settings.port}: {error}"
        ) from None
    store = dist.TCPStore(
        settings.host,
        settings.port,
        is_master=True,
        wait_for_workers=False,
        timeout=timedelta(seconds=settings.join_timeout),
        master_listen_fd=listener.fileno(),
    )
    listener.detach()  # the store's now
    return store


def _connect(settings: PodSettings) -> dist.TCPStore:
    try:
        return dist.TCPStore(
            settings.host,
            settings.port,
            is_master=False,
            timeout=timedelta(seconds=settings.join_timeout),
        )
    except RuntimeError as error:
        raise PodJoinError(
            f"machine {settings.machine_rank} could not reach machine 0's rendezvous at "
            f"{settings.host}:{settings.port} within {settings.join_timeout:g} s: {error}"
        ) from None


def _ask_to_join(store: dist.TCPStore, settings: PodSettings) -> PodKeys:
    """A joiner's side: its proof under a ticket of its own, machine 0's proof checked, the
    verdict and the seating awaited (the store's own timeout bounds each wait)."""
    rank = settings.machine_rank
    try:
        challenge = store.get(CHALLENGE_KEY).decode()
        ticket = store.add(TICKETS_KEY, 1)
        store.set(
            claim_key(ticket), f"{rank}:{proof(settings.token, challenge, f'{ticket}:{rank}')}"
        )
        host_proof = store.get(HOST_PROOF_KEY).decode()
        if not hmac.compare_digest(host_proof, proof(settings.token, challenge, "host")):
            raise PodJoinError(
                f"the rendezvous at {settings.host}:{settings.port} does not know this pod's "
                "token (machine 0 was started with another --token, or it is another pod)"
            )
        keys = PodKeys.of(settings.token, challenge)
        verdict = store.get(keys.verdict(ticket)).decode(errors="replace")
        if verdict != ACCEPTED:
            raise PodJoinError(f"machine 0 refused machine {rank}: {verdict}")
        store.get(keys.seated)
        return keys
    except PodJoinError:
        raise
    except RuntimeError as error:  # the store's timeout, or machine 0 gone
        raise PodJoinError(
            f"machine {rank} got no answer from machine 0's rendezvous at "
            f"{settings.host}:{settings.port} within {settings.join_timeout:g} s: {error}"
        ) from None


def _seat_machines(
    store: dist.TCPStore, settings: PodSettings, challenge: str, keys: PodKeys
) -> None:
    """Machine 0's side: judge every ticket until each machine rank holds a seat, within the
    join bound; refusals are printed and the joiner told why."""
    seats: dict[int, int] = {}
    judged = 0
    deadline = time.monotonic() + settings.join_timeout
    while len(seats) < settings.machines - 1:
        if time.monotonic() > deadline:
            missing = [m for m in range(1, settings.machines) if m not in seats]
            raise PodJoinError(
                f"machines {missing} of {settings.machines} never joined the rendezvous at "
                f"{settings.host}:{settings.port} within {settings.join_timeout:g} s "
                f"(raise the bound with XLASIM_POD_JOIN_TIMEOUT)"
            )
        taken = store.add(TICKETS_KEY, 0)
        while judged < taken:
            key = claim_key(judged + 1)
            if not store.check([key]):
                break  # taken but not yet written: next round
            judged += 1
            verdict = _judge(
                store.get(key).decode(errors="replace"), judged, seats, settings, challenge
            )
            store.set(keys.verdict(judged), verdict)
            if verdict != ACCEPTED:
                print(f"xlasim: pod: refused join ticket {judged}: {verdict}", file=sys.stderr)
        time.sleep(POLL_S)


def _judge(
    claim: str, ticket: int, seats: dict[int, int], settings: PodSettings, challenge: str
) -> str:
    rank_text, _, shown = claim.partition(":")
    if not rank_text.isdigit() or not 1 <= int(rank_text) < settings.machines:
        return f"machine rank {rank_text!r} is not one of 1-{settings.machines - 1}"
    rank = int(rank_text)
    if not hmac.compare_digest(shown, proof(settings.token, challenge, f"{ticket}:{rank}")):
        return f"a machine claiming rank {rank} showed a wrong token"
    if rank in seats:
        return f"machine {rank} has joined already (ticket {seats[rank]})"
    seats[rank] = ticket
    return ACCEPTED
