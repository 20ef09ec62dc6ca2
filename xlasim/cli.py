"""The `xlasim` command.

`xlasim run [--devices N] [--processes P] [--hosts H | --topology NAME] script.py [args...]` runs
an unmodified torch_xla script emulated: the script runs as `__main__` in this process after
emulation is set up, so its `xmp.spawn` / `torch_xla.launch` calls land on the emulated world.
With `--torchrun` the script runs as `torchrun` runs it, on every rank (xlasim/torchrun.py).
With `XLASIM_RUN_REPORT=PATH` set, it writes at exit what the run did (launches, collectives by
op, exit status) as JSON: a script that exits 0 without launching anything is told apart from one
that passed. `--races` fails a launch whose ranks touch one file with no collective between
them; `--schedules N` runs the script under N seeded schedules and `--schedule SEED` replays one
(docs/races.md). `xlasim conformance PATH/TO/xla/test` runs torch_xla's own multi-device tests
emulated and prints a table (see xlasim/conformance); `xlasim lightning PATH/TO/lightning` does the
same for Lightning's TPU tests (see xlasim/lightning), `xlasim huggingface PATH` for accelerate's and
transformers' (see xlasim/huggingface). `xlasim topologies` lists the named slices.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
from collections.abc import Sequence

from . import races
from .base.errors import XlasimError
from .pods import membership


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="xlasim",
        description="Run torch_xla code on an emulated TPU slice: N XLA cores on this machine's "
        "CPU, with every collective, launcher and runtime query answering as on the TPU.",
        epilog="example: xlasim run --devices 8 train.py --epochs 1",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a torch_xla script on emulated cores")
    run.add_argument(
        "--devices", type=int, default=None, help="emulated cores (default: XLASIM_DEVICES, else 8)"
    )
    run.add_argument(
        "--processes",
        type=int,
        default=None,
        help="worker processes holding the cores (default: XLASIM_PROCESSES, else one per core; 1: threads)",
    )
    run.add_argument(
        "--hosts", type=int, default=None, help="emulated hosts the processes are spread over"
    )
    run.add_argument("--topology", default=None, help="a named slice, see `xlasim topologies`")
    run.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds a collective may wait for a missing rank (default 60)",
    )
    run.add_argument(
        "--trace",
        metavar="DIR",
        default=None,
        help="record every rank's collectives, waits, graph executions and checkpoints into "
        "DIR/trace.json (Perfetto, chrome://tracing) and DIR/collectives.txt (docs/tracing.md)",
    )
    run.add_argument(
        "--torchrun",
        action="store_true",
        help="run the script as torchrun would: as __main__ on every rank, each with torchrun's "
        "environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT, TORCHELASTIC_*)",
    )
    run.add_argument(
        "--races",
        action="store_true",
        help="detect races: file accesses of different ranks that no collective orders fail "
        "the launch with both ranks, operations and lines (docs/races.md)",
    )
    run.add_argument(
        "--schedules",
        type=int,
        default=None,
        metavar="N",
        help="run the script under N seeded schedules (ranks take turns: at every file "
        "operation, collective, send and receive the seed decides who goes next), each in a "
        "fresh process; the first that fails names its seed and its interleaving's file",
    )
    run.add_argument(
        "--schedule",
        type=int,
        default=None,
        metavar="SEED",
        help="run under the schedule of this seed (replays a failure --schedules found, and "
        "compares its interleaving with the recorded one)",
    )
    pod = run.add_argument_group(
        "pod", "a slice spread over several machines, each running this command (docs/pods.md)"
    )
    pod.add_argument("--machines", type=int, default=None, help="machines of the pod (default 1)")
    pod.add_argument(
        "--machine-rank", type=int, default=None, help="this machine's place, 0 to machines-1"
    )
    pod.add_argument(
        "--rendezvous",
        metavar="HOST:PORT",
        default=None,
        help="machine 0's address and a port: machine 0 listens there (on that address only)",
    )
    pod.add_argument(
        "--token",
        default=None,
        help="the pod's secret, the same on every machine (default XLASIM_POD_TOKEN; machine 0 "
        "makes and prints one when none is given)",
    )
    pod.add_argument(
        "--machine-address",
        default=None,
        help="the address this machine's links bind to (default: the one routing to the rendezvous)",
    )
    run.add_argument(
        "-m",
        dest="module",
        action="store_true",
        help="treat the target as a module name, like python -m",
    )
    run.add_argument("target", help="the script (or module, with -m) to run")
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    commands.add_parser("topologies", help="list the named slices --topology accepts")
    from .trace_files.cli import add_arguments as add_trace_arguments

    add_trace_arguments(commands.add_parser("trace", help="compare and draw recorded traces"))
    from .conformance import add_arguments

    add_arguments(commands.add_parser("conformance", help="run torch_xla's own tests emulated"))
    from .lightning import add_arguments as add_lightning_arguments

    add_lightning_arguments(
        commands.add_parser("lightning", help="run Lightning's TPU tests emulated")
    )
    from .huggingface import add_arguments as add_huggingface_arguments

    add_huggingface_arguments(
        commands.add_parser(
            "huggingface", help="run accelerate's or transformers' TPU tests and scripts emulated"
        )
    )
    return parser


def list_topologies() -> str:
    from .base.topology import PRESETS

    rows = [(name, topology.describe(), note) for name, (topology, note) in PRESETS.items()]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    return "\n".join(f"{n:<{widths[0]}}  {d:<{widths[1]}}  {note}" for n, d, note in rows)


def run_target(options: argparse.Namespace) -> int:
    """Emulate the slice and run the target: once as `__main__` here (its launches land on the
    world), or with `--torchrun` on every rank (see xlasim/torchrun.py); the exit status."""
    from .activation import emulate

    slice = emulate(
        devices=options.devices,
        processes=options.processes,
        hosts=options.hosts,
        topology=options.topology,
    )
    membership.enter(slice)
    target, args = options.target, options.args
    if options.torchrun:
        from . import torchrun

        refused = torchrun.unsupported(slice)
        if refused:
            print(f"xlasim: {refused}", file=sys.stderr)
            return 2
        torchrun.launch(target, args, options.module)
        return 0
    sys.argv = [target, *args]
    if options.module:
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
        runpy.run_path(target, run_name="__main__")
    return 0


REPORT_ENV = "XLASIM_RUN_REPORT"


def write_run_report(path: str, status: int) -> None:
    """What the run did, for callers that must tell "passed" from "tested nothing" (the
    conformance runner): a script can exit 0 after skipping all of its checks.

    Args:
        path: the JSON file to write (`XLASIM_RUN_REPORT`), replaced if it exists.
        status: the exit status `xlasim run` ends with (130 when interrupted).
    """
    from .ranks import warm_world

    world = warm_world.started()  # not world(): a script that never launched must not start one
    report = {
        "status": status,
        "launches": world.launches if world is not None else 0,
        "collectives": dict(world.collectives) if world is not None else {},
    }
    with open(path, "w") as out:
        json.dump(report, out)


def _run_arguments(options: argparse.Namespace) -> list[str]:
    """The `xlasim run` arguments that give this run again, without `--schedules`."""
    arguments = []
    for flag in ("devices", "processes", "hosts", "topology", "timeout"):
        if getattr(options, flag) is not None:
            arguments += [f"--{flag}", str(getattr(options, flag))]
    for flag, name in (("--torchrun", "torchrun"), ("--races", "races"), ("-m", "module")):
        if getattr(options, name):
            arguments.append(flag)
    return [*arguments, options.target, *options.args]


def _schedule_options(options: argparse.Namespace) -> str:
    """The schedule options given (`--schedule`, `--schedules`), as the user wrote them."""
    given = [("--schedule", options.schedule), ("--schedules", options.schedules)]
    return "/".join(flag for flag, value in given if value is not None)


def main(argv: Sequence[str] | None = None) -> int:
    """The `xlasim` command; returns its exit status.

    Args:
        argv: the command's arguments (default: `sys.argv[1:]`).
    """
    options = _parser().parse_args(argv)
    if options.command == "topologies":
        print(list_topologies())
        return 0
    if options.command == "conformance":
        from .conformance import run_conformance

        return run_conformance(options)
    if options.command == "lightning":
        from .lightning import run_lightning

        return run_lightning(options)
    if options.command == "huggingface":
        from .huggingface import run_huggingface

        return run_huggingface(options)
    if options.command == "trace":
        from .trace_files.cli import run_trace

        return run_trace(options)
    if options.trace is not None:
        from .events.recorder import TRACE_ENV

        os.environ[TRACE_ENV] = options.trace
    if options.timeout is not None:
        os.environ["XLASIM_TIMEOUT"] = str(options.timeout)
    membership.export(
        options.machines,
        options.machine_rank,
        options.rendezvous,
        options.token,
        options.machine_address,
    )
    asked = _schedule_options(options)
    if asked and (options.machines or 1) > 1:
        print(f"xlasim: {races.refused_on_a_pod(asked)}", file=sys.stderr)
        return 2
    if options.races:
        os.environ[races.RACES_ENV] = "1"
    if options.schedule is not None:
        os.environ[races.SCHEDULE_ENV] = str(options.schedule)
    if options.schedule is not None or options.schedules is not None:
        # the interleavings' files are named after the script (docs/races.md)
        os.environ.setdefault(
            races.SCHEDULE_NAME_ENV, os.path.splitext(os.path.basename(options.target))[0]
        )
    if not options.module and not os.path.isfile(options.target):
        print(f"xlasim: no script {options.target!r} (from {os.getcwd()})", file=sys.stderr)
        return 2
    if options.devices is None and not options.topology and "XLASIM_DEVICES" not in os.environ:
        options.devices = 8
    if options.schedules is not None:
        from .races.explore import explore_script

        return explore_script(_run_arguments(options), options.schedules)
    status = 1  # an exception that escapes is exit status 1
    try:
        status = run_target(options)
    except XlasimError as error:
        print(f"xlasim: {type(error).__name__}: {error}", file=sys.stderr)
    except KeyboardInterrupt:  # Ctrl-C (at a rank's debugger prompt too): the ranks are released
        print("xlasim: interrupted", file=sys.stderr)
        status = 130
    except SystemExit as exit:
        from .torchrun import exit_status

        status = exit_status(exit.code)
        raise
    finally:
        if os.environ.get(REPORT_ENV):
            write_run_report(os.environ[REPORT_ENV], status)
    return status
