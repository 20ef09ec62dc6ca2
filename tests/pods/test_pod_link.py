"""A pod of 2 machines on this machine's loopback, each a thread of this process, formed by the
real join (`xlasim.pods.join`: a TCPStore, the token's proofs, a gloo group) and linked by
the real `PodLink`: what machines exchange arrives, a silent machine is named within the bound,
failure notices cross, lengths are checked before allocation, and a client of the store that
lacks the token is refused a seat and acts on none of the pod's keys.

Fast (seconds, no namespaces): what the namespace tests (test_pods.py, test_pod_members.py)
show across machines, here where a mutant run can afford it (tests/mutation/machines_mutants.py).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from datetime import timedelta

import pytest
import torch.distributed as dist

from xlasim.base.errors import MachineLostError, PodJoinError, XlasimError
from xlasim.base.topology import Topology
from xlasim.pods.join import ACCEPTED, join
from xlasim.pods.keys import CHALLENGE_KEY, TICKETS_KEY, PodKeys, claim_key, proof
from xlasim.pods.link import PodLink
from xlasim.pods.membership import PodSettings

TOKEN = "loopback-pod-token"
#: 2 hosts of 2 cores, a process each: machine 0 holds ranks 0-1, machine 1 ranks 2-3.
TOPOLOGY = Topology(devices=4, processes=4, hosts=2)
#: The collective bound of the links (seconds): a silent machine is named after it.
BOUND_S = 2.0
JOIN_TIMEOUT_S = 30.0
#: How long a host without the token waits to enter the gloo group.
INTRUDER_WAIT_S = 4.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _settings(rank: int, port: int, token: str = TOKEN, limit: int = 1 << 20) -> PodSettings:
    return PodSettings(2, rank, "127.0.0.1", port, token, "127.0.0.1", JOIN_TIMEOUT_S, limit)


def _in_thread(work: Callable[[], object]) -> Callable[[], object]:
    """Start `work` on a thread; the returned call waits for its result (or raises its error)."""
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as error:
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def result() -> object:
        thread.join(JOIN_TIMEOUT_S + 10)
        assert not thread.is_alive(), "a machine never finished joining"
        if "error" in outcome:
            raise outcome["error"]  # type: ignore[misc]
        return outcome["value"]

    return result


def _store_client(port: int) -> dist.TCPStore:
    """A host that reaches the rendezvous: any client of the store."""
    return dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=10))


def _wait_for(store: dist.TCPStore, key: str) -> None:
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    while not store.check([key]):
        assert time.monotonic() < deadline, f"machine 0 never set {key}"
        time.sleep(0.05)


def _pod(port: int, before_second: Callable[[], None] = lambda: None) -> list[PodLink]:
    first = _in_thread(lambda: join(_settings(0, port), BOUND_S))
    before_second()
    second = _in_thread(lambda: join(_settings(1, port), BOUND_S))
    return [PodLink(joined(), TOPOLOGY, BOUND_S) for joined in (first, second)]  # type: ignore[arg-type]


@pytest.fixture
def pod() -> list[PodLink]:
    return _pod(_free_port())


def _never() -> None:
    return None


def test_machines_exchange_their_messages(pod):
    other = _in_thread(lambda: pod[1].exchange("launch 0, all_reduce 1", b"from one", [0], _never))
    assert pod[0].exchange("launch 0, all_reduce 1", b"from zero", [1], _never) == {1: b"from one"}
    assert other() == {0: b"from zero"}


def test_a_silent_machine_is_named_within_the_bound(pod):
    began = time.monotonic()
    with pytest.raises(MachineLostError, match=r"machine 1 \(hosts 1, ranks 2-3\) did not answer"):
        pod[0].exchange("launch 0, all_reduce 1", b"from zero", [1], _never)
    assert BOUND_S <= time.monotonic() - began < BOUND_S + 3
    assert pod[0].lost == {1}


def test_failure_notices_cross_and_only_members_post_them(pod):
    port = pod[0].settings.port
    intruder = _store_client(port)
    guessed = PodKeys.of("a-guess", intruder.get(CHALLENGE_KEY).decode())
    intruder.set(guessed.failure(0, 1), "INTRUDER")
    assert pod[0].failures(0) == {}
    pod[1].publish_failure(0, "rank 3 raised ValueError")
    assert pod[0].failures(0) == {1: "rank 3 raised ValueError"}


def test_negative_and_oversized_lengths_are_refused_naming_the_machine(pod):
    limit = pod[0].settings.message_limit
    for declared in (-5, limit + 1):
        with pytest.raises(
            XlasimError,
            match=rf"machine 1 \(hosts 1, ranks 2-3\) declared a message of {declared} bytes",
        ):
            pod[0]._length(1, declared)
    assert pod[0]._length(1, limit) == limit


def test_a_claim_without_the_token_gets_no_seat_and_the_pod_forms():
    port = _free_port()
    refused: list[str] = []

    def intrude() -> None:
        intruder = _store_client(port)
        challenge = intruder.get(CHALLENGE_KEY).decode()
        ticket = intruder.add(TICKETS_KEY, 1)
        intruder.set(claim_key(ticket), f"1:{proof('a-guess', challenge, f'{ticket}:1')}")
        # The test holds the token, so it can read the verdict an intruder could not name.
        verdict = PodKeys.of(TOKEN, challenge).verdict(ticket)
        _wait_for(intruder, verdict)
        refused.append(intruder.get(verdict).decode())

    links = _pod(port, intrude)
    assert refused == ["a machine claiming rank 1 showed a wrong token"]
    assert refused[0] != ACCEPTED
    other = _in_thread(lambda: links[1].exchange("formed", b"1", [0], _never))
    assert links[0].exchange("formed", b"0", [1], _never) == {1: b"1"}
    assert other() == {0: b"0"}


def test_the_pods_keys_are_named_by_the_token_alone():
    mine, guessed = PodKeys.of(TOKEN, "challenge"), PodKeys.of("a-guess", "challenge")
    assert mine == PodKeys.of(TOKEN, "challenge")
    assert mine.space != guessed.space and mine.space != PodKeys.of(TOKEN, "another").space
    for keys in (mine, guessed):
        names = [keys.gloo, keys.seated, keys.verdict(1), keys.failure(0, 1)]
        names += [keys.mailbox(0, "('xm', 100)"), keys.left(1)]
        assert all(name.startswith(f"{keys.space}/") for name in names)
    assert TOKEN not in mine.space


def test_a_joiner_with_another_token_refuses_the_pod():
    port = _free_port()
    first = _in_thread(lambda: join(_settings(0, port), BOUND_S))
    with pytest.raises(PodJoinError, match="does not know this pod's token"):
        join(_settings(1, port, token="not-the-token"), BOUND_S)
    second = _in_thread(lambda: join(_settings(1, port), BOUND_S))
    assert first() is not None and second() is not None


def test_a_host_without_the_token_cannot_register_in_the_gloo_group():
    port = _free_port()
    said: list[str] = []

    def register() -> None:
        intruder = _store_client(port)
        guessed = PodKeys.of("a-guess", intruder.get(CHALLENGE_KEY).decode())
        options = dist.ProcessGroupGloo._Options()
        options._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
        options._timeout = timedelta(seconds=INTRUDER_WAIT_S)
        try:
            dist.ProcessGroupGloo(dist.PrefixStore(guessed.gloo, intruder), 1, 2, options)
            said.append("entered")
        except RuntimeError:
            said.append("kept out")

    intruder = threading.Thread(target=register, daemon=True)
    links = _pod(port, intruder.start)
    other = _in_thread(lambda: links[1].exchange("formed", b"1", [0], _never))
    assert links[0].exchange("formed", b"0", [1], _never) == {1: b"1"}
    assert other() == {0: b"0"}
    intruder.join(INTRUDER_WAIT_S + 10)
    assert said == ["kept out"]
