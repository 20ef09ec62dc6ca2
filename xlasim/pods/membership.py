"""What a machine of a pod is told: how many machines, which one it is, where they meet, the
pod's token; and which emulated hosts and ranks of the slice it holds.

Set by `xlasim run --machines M --machine-rank K --rendezvous HOST:PORT [--token T]` through
the environment (worker processes and the world read it there). No torch here: the command
and the world's choice of ranks read it before anything heavy is imported.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import socket
import sys
from dataclasses import dataclass, field

from ..base import emulated_slice
from ..base.errors import PodJoinError
from ..base.topology import Topology

MACHINES_ENV = "XLASIM_MACHINES"
MACHINE_RANK_ENV = "XLASIM_MACHINE_RANK"
RENDEZVOUS_ENV = "XLASIM_RENDEZVOUS"
TOKEN_ENV = "XLASIM_POD_TOKEN"
ADDRESS_ENV = "XLASIM_MACHINE_ADDRESS"
JOIN_TIMEOUT_ENV = "XLASIM_POD_JOIN_TIMEOUT"
MESSAGE_LIMIT_ENV = "XLASIM_POD_MESSAGE_LIMIT"
#: How long machine 0 waits for the others, and a machine for machine 0, unless told.
DEFAULT_JOIN_TIMEOUT_S = 300.0


def physical_memory() -> int:
    """This machine's memory in bytes: no message longer than that can be held, so none is
    taken (the default of `XLASIM_POD_MESSAGE_LIMIT`)."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class PodSettings:
    """One machine's view of the pod it belongs to."""

    machines: int
    machine_rank: int
    #: Machine 0's rendezvous (a TCPStore): machine 0 listens there, the others connect.
    host: str
    port: int
    token: str
    #: The address this machine's listeners bind and its peers reach it at.
    address: str
    join_timeout: float = DEFAULT_JOIN_TIMEOUT_S
    #: The longest message this machine takes from another (bytes): a longer declared length
    #: is refused before anything is allocated for it.
    message_limit: int = field(default_factory=physical_memory)

    def hosts_of(self, topology: Topology, machine: int) -> range:
        """The emulated hosts `machine` holds: an equal, contiguous share of the slice's.

        Args:
            topology: the whole slice the pod emulates.
            machine: a machine rank of the pod.
        """
        return self._share(topology.hosts, machine)

    def ranks_of(self, topology: Topology, machine: int) -> range:
        """The global ranks `machine` holds (its hosts' cores).

        Args:
            topology: the whole slice the pod emulates.
            machine: a machine rank of the pod.
        """
        return self._share(topology.devices, machine)

    def _share(self, total: int, machine: int) -> range:
        """`machine`'s equal, contiguous share of `total` things (hosts, ranks)."""
        share = total // self.machines
        return range(machine * share, (machine + 1) * share)

    def machine_of(self, topology: Topology, rank: int) -> int:
        """The machine that holds global rank `rank`.

        Args:
            topology: the whole slice the pod emulates.
            rank: a global rank of the slice.
        """
        return rank // (topology.devices // self.machines)

    def check(self, topology: Topology) -> None:
        """Refuse a slice that cannot be spread over the pod's machines in whole hosts."""
        if topology.threaded:
            raise PodJoinError(
                f"a pod of {self.machines} machines needs worker processes on hosts; "
                f"{topology.describe()} is one process (use --hosts/--topology with hosts)"
            )
        if topology.hosts % self.machines:
            raise PodJoinError(
                f"{topology.hosts} emulated hosts cannot be spread evenly over {self.machines} "
                f"machines ({topology.describe()}): each machine holds whole hosts"
            )

    def describe_machine(self, topology: Topology, machine: int) -> str:
        """`machine 1 (hosts 2-3, ranks 8-15)`: how reports name a machine.

        Args:
            topology: the whole slice the pod emulates.
            machine: a machine rank of the pod.
        """
        hosts, ranks = self.hosts_of(topology, machine), self.ranks_of(topology, machine)
        return f"machine {machine} (hosts {_span(hosts)}, ranks {_span(ranks)})"


def _span(values: range) -> str:
    return str(values.start) if len(values) == 1 else f"{values.start}-{values[-1]}"


def from_environment() -> PodSettings | None:
    """The pod this process's machine belongs to, or None when it is a machine of its own."""
    raw_machines = os.environ.get(MACHINES_ENV)
    if raw_machines is None or int(raw_machines) <= 1:
        return None
    machines = int(raw_machines)
    machine_rank = int(os.environ.get(MACHINE_RANK_ENV, "0"))
    if not 0 <= machine_rank < machines:
        raise PodJoinError(f"machine rank {machine_rank} is not one of the pod's 0-{machines - 1}")
    rendezvous = os.environ.get(RENDEZVOUS_ENV)
    if not rendezvous:
        raise PodJoinError(
            f"a pod of {machines} machines needs the rendezvous address: --rendezvous HOST:PORT "
            f"(or {RENDEZVOUS_ENV}), machine 0's address and a free port"
        )
    host, port = parse_endpoint(rendezvous)
    token = os.environ.get(TOKEN_ENV, "")
    if not token:
        raise PodJoinError(
            f"machine {machine_rank} has no pod token: pass the token machine 0 printed with "
            f"--token (or {TOKEN_ENV}); every machine of the pod needs the same one"
        )
    address = os.environ.get(ADDRESS_ENV) or route_to(host)
    timeout = float(os.environ.get(JOIN_TIMEOUT_ENV, DEFAULT_JOIN_TIMEOUT_S))
    limit = int(os.environ.get(MESSAGE_LIMIT_ENV) or physical_memory())
    return PodSettings(machines, machine_rank, host, port, token, address, timeout, limit)


def export(
    machines: int | None,
    machine_rank: int | None,
    rendezvous: str | None,
    token: str | None,
    address: str | None = None,
    token_flag: str = "--token",
) -> None:
    """Put the pod options given into the environment, where the world and its worker processes
    read them; on machine 0 of a pod without a token, make one and print it for the others.

    Args:
        machines: how many machines the pod has (None: not given; so for each option, the
            environment's value, if any, stands).
        machine_rank: which of them this one is.
        rendezvous: machine 0's `HOST:PORT`, where the machines meet.
        token: the pod's shared secret.
        address: this machine's address as the others reach it.
        token_flag: how the user passes the token to the other machines, for the printed line.
    """
    for value, name in (
        (machines, MACHINES_ENV),
        (machine_rank, MACHINE_RANK_ENV),
        (rendezvous, RENDEZVOUS_ENV),
        (token, TOKEN_ENV),
        (address, ADDRESS_ENV),
    ):
        if value is not None:
            os.environ[name] = str(value)
    pod = int(os.environ.get(MACHINES_ENV, "1")) > 1
    first = os.environ.get(MACHINE_RANK_ENV, "0") == "0"
    if pod and first and not os.environ.get(TOKEN_ENV):
        os.environ[TOKEN_ENV] = secrets.token_hex(16)
        print(
            f"xlasim: the pod's token (give it to every other machine with {token_flag}): "
            f"{os.environ[TOKEN_ENV]}",
            file=sys.stderr,
        )


def enter(topology: Topology) -> None:
    """On a machine of a pod, check the slice spreads over the machines and make this process
    answer as the first host this machine holds (as the launching host of a TPU VM does).

    Args:
        topology: the emulated slice this process set up.
    """
    settings = from_environment()
    if settings is not None:
        settings.check(topology)
        emulated_slice.move_to_host(settings.hosts_of(topology, settings.machine_rank).start)


def parse_endpoint(text: str) -> tuple[str, int]:
    """`HOST:PORT` (an IPv4 address or a name, and a port) as (host, port)."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise PodJoinError(f"rendezvous {text!r} is not HOST:PORT")
    return host, int(port)


def route_to(host: str) -> str:
    """The address of this machine's interface that reaches `host` (the kernel's route; a UDP
    socket's connect sends nothing): where this machine's listeners bind by default."""
    if _is_local(host):
        return host
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, 9))
        return probe.getsockname()[0]


def _is_local(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
