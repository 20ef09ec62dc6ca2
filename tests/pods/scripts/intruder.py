"""A host that reaches a pod's rendezvous but lacks its token (docs/pods.md, "Threat model").

It knows everything public: xlasim's code and every key it can read in the store, and it names
the pod's keys as a member would (`xlasim.pods.keys`) from a token it guesses. It tries
every way in that does not need the token: post machine 1's failure notice for every launch,
fill the mailboxes of the ranks' `xm` channels with well-formed messages of its own, and take
machine 1's place in the pod's gloo group. It says what it did, one line per attack:

    TARGET=HOST:PORT python intruder.py LAUNCHES CHANNEL...

    notice: posted for launches 0-1
    mailbox: posted N messages
    gloo: trying as machine 1
    gloo: entered as machine 1             (a pod's machine 0 took it in)
    gloo: kept out (...)                   (no machine 0 answered, or the store went)
"""

import os
import socket
import sys
import time
from datetime import timedelta
from types import SimpleNamespace

import torch
import torch.distributed as dist

from xlasim.pods import wire
from xlasim.pods.keys import CHALLENGE_KEY, PodKeys

#: How long the intruder waits for the store and for a gloo peer (the test ends it sooner).
BOUND_S = 300.0
GUESSED_TOKEN = "a-guess"
NOTICE = "INTRUDER: a failure notice from a host without the pod's token"


def main(launches: int, channels: list[int]) -> None:
    host, port = os.environ["TARGET"].rsplit(":", 1)
    store = _connect(host, int(port))
    keys = PodKeys.of(GUESSED_TOKEN, store.get(CHALLENGE_KEY).decode())
    for launch in range(launches):
        store.set(keys.failure(launch, 1), NOTICE)
    print(f"notice: posted for launches 0-{launches - 1}", flush=True)
    posted = [
        _post(store, keys.mailbox(launch, repr(("xm", channel))), channel)
        for launch in range(launches)
        for channel in channels
    ]
    print(f"mailbox: posted {len(posted)} messages", flush=True)
    print("gloo: trying as machine 1", flush=True)
    print(_register(store, keys.gloo, host), flush=True)


def _connect(host: str, port: int) -> dist.TCPStore:
    deadline = time.monotonic() + BOUND_S
    while True:
        try:
            return dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=BOUND_S))
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _post(store: dist.TCPStore, mailbox: str, channel: int) -> None:
    """A message on `mailbox` as the channel's sender posts it (`PodLink.post`), holding 6
    sevens where collectives.py's ring sends 6 random numbers."""
    sender = channel - 100
    call = SimpleNamespace(op="send", signature=(("channel_id", channel),), location="intruder")
    message = wire.encode({sender: (call, [torch.full((6,), 7.0)])})
    store.set(f"{mailbox}/{store.add(f'{mailbox}/posted', 1)}", message)


def _register(store: dist.TCPStore, prefix: str, host: str) -> str:
    """Machine 1's place in the gloo group under `prefix`, bound to this host's address."""
    options = dist.ProcessGroupGloo._Options()
    address = _own_address(host)
    options._devices = [dist.ProcessGroupGloo.create_device(hostname=address)]
    options._timeout = timedelta(seconds=BOUND_S)
    try:
        dist.ProcessGroupGloo(dist.PrefixStore(prefix, store), 1, 2, options)
    except RuntimeError as error:
        return f"gloo: kept out ({str(error).splitlines()[0][:200]})"
    return "gloo: entered as machine 1"


def _own_address(host: str) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, 9))
        return probe.getsockname()[0]


if __name__ == "__main__":
    main(int(sys.argv[1]), [int(channel) for channel in sys.argv[2:]])
