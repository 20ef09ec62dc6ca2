"""The plugin's settings, resolved once from the options, ini keys and environment (`Settings`).

Precedence for each setting: command line, then environment variable, then ini file, then the
default. The resolved settings live on the config's stash so every other module reads the same
answer (and xdist workers, which re-parse the same arguments and environment, agree with it).

The slice is either counted (`--xla-devices`, `--xla-processes`, `--xla-hosts`) or named
(`--xla-topology`, a preset of `xlasim topologies`). Whichever comes from the more specific
source wins (a named preset in the environment gives way to counts on the command line, and
the other way round); a name and counts that disagree at the same level are a usage error.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

from ...base.errors import PodJoinError, XlasimError
from ...base.topology import Topology, preset
from ...pods import membership as pod
from ...tpu.arithmetic_choice import ARITHMETIC_ENV, check_arithmetic

DEVICES_ENV = "XLASIM_DEVICES"
PROCESSES_ENV = "XLASIM_PROCESSES"
HOSTS_ENV = "XLASIM_HOSTS"
TOPOLOGY_ENV = "XLASIM_TOPOLOGY"
BACKEND_ENV = "XLASIM_BACKEND"
TEST_TIMEOUT_ENV = "XLASIM_TEST_TIMEOUT"
#: Cores emulated when nothing says how many: a v4-8 / v5e-8 host's worth.
DEFAULT_DEVICES = 8
#: Bound on one per-rank test or `xla_world.run` call; past it the run fails with every stack.
DEFAULT_TIMEOUT_S = 300.0
BACKENDS = ("auto", "emulated", "native")


@dataclass(frozen=True)
class Settings:
    """What the user asked for. `backend` is still "auto" here; `session.activate` decides it."""

    devices: int | None
    backend: str
    timeout: float
    #: Worker processes holding the cores (None: one per core, as on TPU v4+).
    processes: int | None = None
    #: Emulated hosts the processes are spread over (None: 1).
    hosts: int | None = None
    #: A named preset (`xlasim topologies`); when set, it gives devices, processes and hosts.
    topology: str | None = None
    #: Whether any of processes/hosts/topology came from the command line (native refuses them).
    topology_on_command_line: bool = False
    #: f32 matmul arithmetic on emulated cores ("tpu", "exact"), or None: `XLASIM_ARITHMETIC`,
    #: else the TPU's (the core reads the variable, so it is only set from here when asked).
    arithmetic: str | None = None
    #: The pod this session's machine belongs to (docs/pods.md), or None: a machine of its own.
    pod: PodOptions | None = None

    def slice(self) -> Topology:
        """The emulated slice asked for (cores default to 8)."""
        if self.topology:
            return preset(self.topology)
        return Topology(self.devices or DEFAULT_DEVICES, self.processes, self.hosts or 1)

    def describe_slice(self) -> str:
        """`v4-16: 2 hosts x 4 processes x 1 core = 8 cores`, or the counts alone."""
        described = self.slice().describe()
        return f"{self.topology}: {described}" if self.topology else described


@dataclass(frozen=True)
class PodOptions:
    """`--xla-machines=M --xla-machine-rank=K --xla-rendezvous=HOST:PORT --xla-token=T`: the
    slice spread over M machines, each running the same collection (docs/pods.md)."""

    machines: int
    machine_rank: int
    rendezvous: str
    #: None: machine 0 makes one and prints it (the others must be given it).
    token: str | None

    def export(self) -> None:
        """Into the environment, where the world and its worker processes read a pod."""
        pod.export(
            self.machines, self.machine_rank, self.rendezvous, self.token, token_flag="--xla-token"
        )


settings_key = pytest.StashKey[Settings]()


#: Where a value came from, most specific first.
COMMAND_LINE, ENVIRONMENT, INI, UNSET = 3, 2, 1, 0

#: The command-line flag of each setting (its ini key is the setting's own name).
_FLAGS = {
    "xla_devices": "--xla-devices",
    "xla_processes": "--xla-processes",
    "xla_hosts": "--xla-hosts",
    "xla_topology": "--xla-topology",
    "xla_backend": "--xla-backend",
    "xla_timeout": "--xla-timeout",
    "xla_machines": "--xla-machines",
    "xla_machine_rank": "--xla-machine-rank",
    "xla_rendezvous": "--xla-rendezvous",
    "xla_token": "--xla-token",
}
#: The settings that count the slice (a named topology competes with them as a whole).
_COUNTS = ("xla_devices", "xla_processes", "xla_hosts")
ENVIRONMENT_VARIABLES = {
    "xla_devices": DEVICES_ENV,
    "xla_processes": PROCESSES_ENV,
    "xla_hosts": HOSTS_ENV,
    "xla_topology": TOPOLOGY_ENV,
    "xla_backend": BACKEND_ENV,
    "xla_timeout": TEST_TIMEOUT_ENV,
    "xla_machines": pod.MACHINES_ENV,
    "xla_machine_rank": pod.MACHINE_RANK_ENV,
    "xla_rendezvous": pod.RENDEZVOUS_ENV,
    "xla_token": pod.TOKEN_ENV,
}


@dataclass(frozen=True)
class Source:
    """A setting's raw value, and where it came from (so an error blames the right place)."""

    option: str
    raw: str | None
    level: int

    @property
    def name(self) -> str:
        """`--xla-devices`, `XLASIM_DEVICES` or `ini xla_devices`, as the user wrote it."""
        if self.level == ENVIRONMENT:
            return ENVIRONMENT_VARIABLES[self.option]
        if self.level == INI:
            return f"ini {self.option}"
        return _FLAGS[self.option]

    def __str__(self) -> str:
        """`--xla-devices=8`, `XLASIM_PROCESSES=3`, `ini xla_hosts=2`."""
        return f"{self.name}={self.raw}"


def _source(config: pytest.Config, option: str) -> Source:
    value = getattr(config.known_args_namespace, option, None)
    if value is not None:
        return Source(option, str(value), COMMAND_LINE)
    env = ENVIRONMENT_VARIABLES[option]
    if os.environ.get(env):
        return Source(option, os.environ[env], ENVIRONMENT)
    value = config.getini(option) or None
    return Source(option, str(value), INI) if value is not None else Source(option, None, UNSET)


def asked_by(config: pytest.Config) -> str | None:
    """The first setting that asks for XLA (`--xla-devices=8`, `XLASIM_TOPOLOGY=v3-8`, `ini
    xla_backend=native`), or None: a session asks for XLA through any of them (or by
    collecting a test that needs it, which `backends/choice` sees later)."""
    for option in ENVIRONMENT_VARIABLES:
        source = _source(config, option)
        if source.raw is not None:
            return str(source)
    return None


def _whole(source: Source, least: int = 1) -> int | None:
    if source.raw is None:
        return None
    try:
        value = int(source.raw)
    except ValueError:
        raise pytest.UsageError(
            f"xlasim: {source.name}={source.raw!r} is not a whole number"
        ) from None
    if value < least:
        raise pytest.UsageError(f"xlasim: {source.name} must be at least {least}, got {value}")
    return value


def _pod(config: pytest.Config) -> PodOptions | None:
    """The pod options, checked (a machine rank within the pod, a HOST:PORT rendezvous), or
    None when the session's slice is on this machine alone."""
    machines = _whole(_source(config, "xla_machines"))
    if machines is None or machines == 1:
        return None
    rank = _source(config, "xla_machine_rank")
    machine_rank = _whole(rank, least=0) or 0
    if machine_rank >= machines:
        raise pytest.UsageError(
            f"xlasim: {rank}: a machine rank of a pod of {machines} machines is 0-{machines - 1}"
        )
    rendezvous = _source(config, "xla_rendezvous")
    if rendezvous.raw is None:
        raise pytest.UsageError(
            f"xlasim: a pod of {machines} machines needs --xla-rendezvous=HOST:PORT (or "
            f"{pod.RENDEZVOUS_ENV}, ini xla_rendezvous): machine 0's address and a free port"
        )
    try:
        pod.parse_endpoint(rendezvous.raw)
    except PodJoinError as error:
        raise pytest.UsageError(f"xlasim: {rendezvous.name}: {error}") from None
    return PodOptions(machines, machine_rank, rendezvous.raw, _source(config, "xla_token").raw)


def _slice(config: pytest.Config) -> tuple[int | None, int | None, int | None, str | None, bool]:
    """devices, processes, hosts, preset name, and whether the command line shaped the slice."""
    counted = {option: _source(config, option) for option in _COUNTS}
    counts = {option: _whole(source) for option, source in counted.items()}
    named = _source(config, "xla_topology")
    name, name_level = named.raw, named.level
    on_command_line = name_level == COMMAND_LINE or any(
        source.level == COMMAND_LINE
        for option, source in counted.items()
        if option != "xla_devices"
    )
    counts_level = max(source.level for source in counted.values())
    if name is None or counts_level > name_level:
        if name is not None and name_level == ENVIRONMENT:
            os.environ.pop(TOPOLOGY_ENV)  # the core must not pick it up behind our back
        _check_split(counted, counts)
        return (*counts.values(), None, on_command_line)
    try:
        chosen = preset(name)
    except XlasimError as error:
        raise pytest.UsageError(f"xlasim: {named.name}: {error}") from None
    preset_counts = {
        "xla_devices": chosen.devices,
        "xla_processes": chosen.processes,
        "xla_hosts": chosen.hosts,
    }
    for option, source in counted.items():
        if source.level == name_level and counts[option] != preset_counts[option]:
            raise pytest.UsageError(
                f"xlasim: topology {name!r} is {chosen.describe()}, but {source.name} asks for "
                f"{counts[option]} ({named.name} and {source.name} come from the same level): "
                "give either the preset or the counts"
            )
    return chosen.devices, chosen.processes, chosen.hosts, name, on_command_line


def _check_split(counted: dict[str, Source], counts: dict[str, int | None]) -> None:
    """The counts make a slice (cores split evenly over processes, processes over hosts)."""
    try:
        Topology(
            counts["xla_devices"] or DEFAULT_DEVICES,
            counts["xla_processes"],
            counts["xla_hosts"] or 1,
        )
    except XlasimError as error:
        given = ", ".join(str(source) for source in counted.values() if source.raw is not None)
        raise pytest.UsageError(f"xlasim: {error} ({given or 'the defaults'})") from None


def resolve(config: pytest.Config) -> Settings:
    """Read the settings (once per config) and check them, naming where a bad value came from."""
    if settings_key in config.stash:
        return config.stash[settings_key]
    count, processes, hosts, name, on_command_line = _slice(config)
    backend = _source(config, "xla_backend")
    if backend.raw is not None and backend.raw not in BACKENDS:
        raise pytest.UsageError(
            f"xlasim: {backend.name}={backend.raw!r} is not one of {', '.join(BACKENDS)}"
        )
    timeout = _source(config, "xla_timeout")
    try:
        seconds = DEFAULT_TIMEOUT_S if timeout.raw is None else float(timeout.raw)
    except ValueError:
        raise pytest.UsageError(
            f"xlasim: {timeout.name}={timeout.raw!r} is not a number of seconds"
        ) from None
    if seconds <= 0:
        raise pytest.UsageError(f"xlasim: {timeout.name} must be positive, got {seconds:g}")
    config.stash[settings_key] = Settings(
        count,
        backend.raw or "auto",
        seconds,
        processes,
        hosts,
        name,
        on_command_line,
        _arithmetic(config),
        _pod(config),
    )
    return config.stash[settings_key]


def _arithmetic(config: pytest.Config) -> str | None:
    """`--xla-arithmetic`, else (unless `XLASIM_ARITHMETIC` is set: the core reads it) ini
    `xla_arithmetic`; a bad ini value is a usage error naming it (the option has choices)."""
    chosen = getattr(config.known_args_namespace, "xla_arithmetic", None)
    if chosen is not None:
        return chosen
    written = config.getini("xla_arithmetic") or None
    if written is None or os.environ.get(ARITHMETIC_ENV):
        return None
    try:
        return check_arithmetic(written, "ini xla_arithmetic")
    except ValueError as error:
        raise pytest.UsageError(f"xlasim: {error}") from None
