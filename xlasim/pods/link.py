"""A joined machine's links to the others: collectives' bytes through the gloo group, and
failure notices and leaving through the rendezvous store.

An exchange sends this machine's message to every peer machine of a collective and receives
theirs: a header (a check of the collective's key, the length) and the bytes, each under a tag
made from the key, so exchanges of collectives that complete in different orders on different
machines never meet the wrong message. It runs on a thread of its own; the rank that waits for
it is released by an abort of its run and bounded by the collective timeout.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from datetime import timedelta

import torch

from ..base.errors import (
    CollectiveTimeoutError,
    MachineLostError,
    WorldAbortedError,
    XlasimError,
)
from ..base.topology import Topology
from .join import Joined

#: How long machine 0 keeps the rendezvous up for machines still finishing, at exit.
LEAVE_TIMEOUT_S = 30.0
#: How often a waiting rank looks at its run's abort while machines exchange.
POLL_S = 0.05
#: How much longer gloo waits than an exchange, so the exchange's own deadline comes first.
GLOO_MARGIN_S = 5.0


def header(check: int, length: int) -> torch.Tensor:
    """What goes before a message's bytes: the check of its collective's key, and its length.

    Args:
        check: a number both ends compute from the collective's key, so that a message of
            another collective is refused rather than read as this one's.
        length: the message's length in bytes.
    """
    return torch.tensor([check, length], dtype=torch.int64)


class _PeerFailed(Exception):
    def __init__(self, machine: int, cause: BaseException):
        super().__init__(str(cause))
        self.machine = machine
        self.cause = cause


class PodLink:
    """This machine's side of the pod once joined."""

    def __init__(self, joined: Joined, topology: Topology, collective_timeout: float):
        self.settings = joined.settings
        self.topology = topology
        self.timeout = collective_timeout
        self.keys = joined.keys
        self._store = joined.store
        self._group = joined.group
        #: Machines found gone (links broken, or silent past the bound): not waited for again.
        self.lost: set[int] = set()

    def describe(self, machine: int) -> str:
        return self.settings.describe_machine(self.topology, machine)

    def exchange(
        self,
        key: str,
        message: bytes,
        peers: list[int],
        aborted: Callable[[], BaseException | None],
        timeout: float | None = None,
        what: str = "a collective",
    ) -> dict[int, bytes]:
        """Send `message` to every machine in `peers` and return theirs, by machine.

        Args:
            key: the collective, the same text on every machine (launch, ranks, sequence).
            message: this machine's ranks' calls and payloads (`wire.encode`).
            peers: the other machines with ranks in the collective.
            aborted: the run's abort cause, if any: a wait it ends raises `WorldAbortedError`.
            timeout: the bound of the wait (default: the collective bound).
            what: what is exchanged, for the error naming a machine that never answers.
        """
        bound = self.timeout if timeout is None else timeout
        result: dict[str, object] = {"waiting": peers[0]}
        done = threading.Event()

        def work() -> None:
            try:
                result["received"] = self._send_and_receive(key, message, peers, result, bound)
            except BaseException as error:  # reported by the waiting rank
                result["error"] = error
            finally:
                done.set()

        threading.Thread(target=work, name="xlasim-pod-exchange", daemon=True).start()
        deadline = time.monotonic() + bound
        while not done.wait(POLL_S):
            cause = aborted()
            if cause is not None:
                raise WorldAbortedError(cause)
            if time.monotonic() > deadline:
                silent: int = result["waiting"]  # type: ignore[assignment]
                self.lost.add(silent)
                raise MachineLostError(
                    f"{self.describe(silent)} did not answer {what} within "
                    f"{bound:g} s (raise the bound with XLASIM_TIMEOUT)",
                    silent,
                )
        error = result.get("error")
        if isinstance(error, _PeerFailed):
            self.lost.add(error.machine)
            raise MachineLostError(
                f"{self.describe(error.machine)} was lost during a collective: {error.cause}",
                error.machine,
            )
        if error is not None:
            raise error  # type: ignore[misc]
        return result["received"]  # type: ignore[return-value]

    def _send_and_receive(
        self, key: str, message: bytes, peers: list[int], progress: dict, seconds: float
    ) -> dict[int, bytes]:
        digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
        tag = int.from_bytes(digest[:4], "big") & 0x3FFFFFFE  # even: the body's tag is tag + 1
        check = int.from_bytes(digest, "big", signed=True)
        mine = header(check, len(message))
        body = torch.frombuffer(bytearray(message), dtype=torch.uint8)
        # gloo's own bound only backs up `exchange`'s deadline, which names a silent machine.
        bound = timedelta(seconds=seconds + GLOO_MARGIN_S)
        sends = []
        for peer in peers:
            sends.append((peer, self._group.send([mine], peer, tag)))
            sends.append((peer, self._group.send([body], peer, tag + 1)))
        received = {}
        for peer in peers:
            progress["waiting"] = peer
            theirs = torch.empty(2, dtype=torch.int64)
            self._receive(theirs, peer, tag, bound)
            if int(theirs[0]) != check:
                error = XlasimError(f"it sent another collective's header (not {key})")
                raise _PeerFailed(peer, error)
            raw = torch.empty(self._length(peer, int(theirs[1])), dtype=torch.uint8)
            self._receive(raw, peer, tag + 1, bound)
            received[peer] = raw.numpy().tobytes()
        for peer, send in sends:
            try:
                send.wait(bound)
            except RuntimeError as error:
                raise _PeerFailed(peer, error) from None
        return received

    def _receive(self, tensor: torch.Tensor, peer: int, tag: int, bound: timedelta) -> None:
        try:
            self._group.recv([tensor], peer, tag).wait(bound)
        except RuntimeError as error:
            raise _PeerFailed(peer, error) from None

    def _length(self, peer: int, declared: int) -> int:
        """The length `peer` declared for its message, checked before anything is allocated
        for it: a negative one, or one longer than this machine takes, is refused."""
        limit = self.settings.message_limit
        if not 0 <= declared <= limit:
            raise XlasimError(
                f"{self.describe(peer)} declared a message of {declared} bytes: refused before "
                f"anything was allocated for it (a machine takes 0 to {limit} bytes from "
                "another: XLASIM_POD_MESSAGE_LIMIT)"
            )
        return declared

    # ------------------------------------------------------------- messages through the store

    def post(self, mailbox: str, message: bytes) -> None:
        """Append `message` to the pod's `mailbox` (a FIFO every machine shares, in the store:
        the order of posting is the store's order of `add`).

        Args:
            mailbox: the mailbox's name, the same text on every machine.
            message: the message, plain bytes.
        """
        try:
            index = self._store.add(f"{mailbox}/posted", 1)
            self._store.set(f"{mailbox}/{index}", message)
        except RuntimeError as error:
            raise self._rendezvous_lost(error) from None

    def take(self, mailbox: str, aborted: Callable[[], BaseException | None]) -> bytes:
        """Take the oldest message of `mailbox` not yet taken by any machine, waiting for it
        within the collective bound.

        Args:
            mailbox: the mailbox's name, as `post` was given it.
            aborted: the run's abort cause, if any: a wait it ends raises `WorldAbortedError`.

        Raises:
            CollectiveTimeoutError: no machine posted the message within the bound.
        """
        try:
            key = f"{mailbox}/{self._store.add(f'{mailbox}/taken', 1)}"
            deadline = time.monotonic() + self.timeout
            while not self._store.check([key]):
                cause = aborted()
                if cause is not None:
                    raise WorldAbortedError(cause)
                if time.monotonic() > deadline:
                    raise CollectiveTimeoutError(
                        f"no rank of the pod's {self.settings.machines} machines sent it within "
                        f"{self.timeout:g} s (raise the bound with XLASIM_TIMEOUT)"
                    )
                time.sleep(POLL_S)
            message = self._store.get(key)
            self._store.delete_key(key)
        except RuntimeError as error:
            raise self._rendezvous_lost(error) from None
        return message

    def _rendezvous_lost(self, error: RuntimeError) -> MachineLostError:
        return MachineLostError(
            f"{self.describe(0)}'s rendezvous, through which the pod's messages pass, is gone: "
            f"{error}",
            0,
        )

    # ------------------------------------------------------------- notices through the store

    def publish_failure(self, launch: int, text: str) -> None:
        """Tell the other machines this machine's share of launch `launch` failed, and why.

        Args:
            launch: the launch's number, counted alike on every machine of the pod.
            text: why, as the other machines' errors quote it.
        """
        # When the rendezvous is gone, the others see this machine's links break instead.
        with suppress(RuntimeError):
            self._store.set(self.keys.failure(launch, self.settings.machine_rank), text)

    def failures(self, launch: int) -> dict[int, str]:
        """What other machines published about their failures in launch `launch`."""
        found = {}
        for machine in range(self.settings.machines):
            if machine == self.settings.machine_rank:
                continue
            key = self.keys.failure(launch, machine)
            try:
                if self._store.check([key]):
                    found[machine] = self._store.get(key).decode(errors="replace")
            except RuntimeError as error:
                found[0] = f"its rendezvous is gone ({error})"
        return found

    def failed(self, machine: int, notice: str) -> MachineLostError:
        """The error of a machine that published a failure (`notice`).

        Args:
            machine: the machine rank that failed.
            notice: what it published about its failure (`publish_failure`).
        """
        return MachineLostError(
            f"{self.describe(machine)} failed during the run; this machine's ranks were "
            f"released. It said: {notice}",
            machine,
        )

    def leave(self) -> None:
        """Say this machine is done; machine 0 keeps the rendezvous up until every machine has
        said so (bounded), since the others' last notices go through it."""
        me = self.settings.machine_rank
        try:
            self._store.set(self.keys.left(me), "1")
            if me == 0:
                others = [
                    self.keys.left(m)
                    for m in range(1, self.settings.machines)
                    if m not in self.lost
                ]
                if others:
                    self._store.wait(others, timedelta(seconds=LEAVE_TIMEOUT_S))
        except RuntimeError:
            pass  # a machine that never leaves cleanly was reported during the run
