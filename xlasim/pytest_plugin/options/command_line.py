"""The plugin's command-line options and ini keys (what they mean: `settings`)."""

from __future__ import annotations

import pytest

from ...base.topology import PRESETS
from ...pods import membership as pod
from ...tpu.arithmetic_choice import ARITHMETIC_ENV, ARITHMETICS
from .settings import (
    BACKEND_ENV,
    BACKENDS,
    DEFAULT_DEVICES,
    DEFAULT_TIMEOUT_S,
    DEVICES_ENV,
    HOSTS_ENV,
    PROCESSES_ENV,
    TEST_TIMEOUT_ENV,
    TOPOLOGY_ENV,
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("xlasim", "distributed XLA tests on emulated or real TPU cores")
    group.addoption(
        "--xla-devices",
        type=int,
        default=None,
        metavar="N",
        help=f"number of emulated XLA cores (env {DEVICES_ENV}, ini xla_devices; "
        f"default {DEFAULT_DEVICES}). With the native backend: the cores expected.",
    )
    group.addoption(
        "--xla-backend",
        choices=BACKENDS,
        default=None,
        help=f"emulated: rank threads on the XLA CPU device; native: the real xmp.spawn; "
        f"auto (default): native when PJRT_DEVICE=TPU or a TPU is attached (env {BACKEND_ENV}).",
    )
    group.addoption(
        "--xla-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"bound on one per-rank test or xla_world.run call (env {TEST_TIMEOUT_ENV}, "
        f"ini xla_timeout; default {DEFAULT_TIMEOUT_S:g}); @pytest.mark.xla(timeout=...) overrides.",
    )
    group.addoption(
        "--xla-processes",
        type=int,
        default=None,
        metavar="P",
        help=f"worker processes holding the emulated cores, N/P each (env {PROCESSES_ENV}, "
        "ini xla_processes; default: one per core, as on TPU v4+; 1: every core a thread of "
        "the pytest process, faster but ranks share globals and the CPU RNG)",
    )
    group.addoption(
        "--xla-hosts",
        type=int,
        default=None,
        metavar="H",
        help=f"emulated hosts the processes are spread over, each with its own working "
        f"directory (env {HOSTS_ENV}, ini xla_hosts; default 1)",
    )
    group.addoption(
        "--xla-topology",
        default=None,
        metavar="NAME",
        help=f"a named slice instead of the counts: {', '.join(PRESETS)} (env {TOPOLOGY_ENV}, "
        "ini xla_topology; `xlasim topologies` describes them)",
    )
    group.addoption(
        "--xla-arithmetic",
        choices=ARITHMETICS,
        default=None,
        help=f"f32 matmuls and convolutions on emulated cores: tpu (default) as the TPU's MXU "
        f"at torch_xla's precision setting, exact as the CPU's f32 (env {ARITHMETIC_ENV}, ini "
        "xla_arithmetic; docs/tpu-arithmetic.md). Natively the device computes as it does.",
    )
    group.addoption(
        "--xla-trace",
        default=None,
        metavar="DIR",
        help="record every rank's collectives, waits, graph executions and checkpoints: a "
        "trace per test in DIR/<test id>/ (trace.json for Perfetto, collectives.txt); see "
        "docs/tracing.md",
    )
    group.addoption(
        "--xla-races",
        action="store_true",
        default=False,
        help="detect races: a test whose ranks touch one file with no collective between them "
        "fails, naming both ranks, operations and lines (docs/races.md)",
    )
    group.addoption(
        "--xla-schedules",
        type=int,
        default=None,
        metavar="N",
        help="run every rank test under N seeded schedules (ranks take turns; at every file "
        "operation, collective, send and receive the seed decides who goes next); a failure "
        "names its seed and the file of its interleaving",
    )
    group.addoption(
        "--xla-schedule",
        type=int,
        default=None,
        metavar="SEED",
        help="run the ranks under the schedule of this seed (replays a failure of "
        "--xla-schedules, and compares its interleaving with the recorded one)",
    )
    pods = parser.getgroup(
        "xlasim pod",
        "the emulated slice spread over several machines, each running the same "
        "collection (docs/pods.md)",
    )
    pods.addoption(
        "--xla-machines",
        type=int,
        default=None,
        metavar="M",
        help=f"machines of the pod, each holding an equal share of the slice's hosts (env "
        f"{pod.MACHINES_ENV}, ini xla_machines; default 1)",
    )
    pods.addoption(
        "--xla-machine-rank",
        type=int,
        default=None,
        metavar="K",
        help=f"this machine's place, 0 to M-1 (env {pod.MACHINE_RANK_ENV}, ini xla_machine_rank)",
    )
    pods.addoption(
        "--xla-rendezvous",
        default=None,
        metavar="HOST:PORT",
        help=f"machine 0's address and a free port; machine 0 listens there only (env "
        f"{pod.RENDEZVOUS_ENV}, ini xla_rendezvous)",
    )
    pods.addoption(
        "--xla-token",
        default=None,
        metavar="TOKEN",
        help=f"the pod's secret, the same on every machine (env {pod.TOKEN_ENV}, ini xla_token; "
        "machine 0 makes and prints one when none is given). The environment keeps it out of ps.",
    )
    parser.addini("xla_devices", "number of emulated XLA cores", default=None)
    parser.addini("xla_processes", "worker processes holding the emulated cores", default=None)
    parser.addini("xla_hosts", "emulated hosts the processes are spread over", default=None)
    parser.addini("xla_topology", "a named slice (xlasim topologies)", default=None)
    parser.addini("xla_backend", "auto, emulated or native", default=None)
    parser.addini("xla_timeout", "seconds a per-rank test may take", default=None)
    parser.addini("xla_arithmetic", "tpu or exact: f32 matmuls on emulated cores", default=None)
    parser.addini("xla_machines", "machines of the pod the slice is spread over", default=None)
    parser.addini("xla_machine_rank", "this machine's place in the pod", default=None)
    parser.addini("xla_rendezvous", "machine 0's HOST:PORT", default=None)
    parser.addini("xla_token", "the pod's secret (better in XLASIM_POD_TOKEN)", default=None)
