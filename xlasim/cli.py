"""The `xlasim` command.

`xlasim run [--devices N] [--processes P] [--hosts H | --topology NAME] script.py [args...]` runs
an unmodified torch_xla script emulated: the script runs as `__main__` in this process after
emulation is set up, so its `xmp.spawn` / `torch_xla.launch` calls land on the emulated world.
`xlasim topologies` lists the named slices.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from collections.abc import Sequence

from .errors import XlasimError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xlasim", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a torch_xla script on emulated cores")
    run.add_argument(
        "--devices", type=int, default=None, help="emulated cores (default: XLASIM_DEVICES, else 8)"
    )
    run.add_argument(
        "--processes",
        type=int,
        default=None,
        help="worker processes holding the cores (default: XLASIM_PROCESSES, else 1)",
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
        "-m",
        dest="module",
        action="store_true",
        help="treat the target as a module name, like python -m",
    )
    run.add_argument("target", help="the script (or module, with -m) to run")
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    commands.add_parser("topologies", help="list the named slices --topology accepts")
    return parser


def list_topologies() -> str:
    from .topology import PRESETS

    rows = [(name, topology.describe(), note) for name, (topology, note) in PRESETS.items()]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    return "\n".join(f"{n:<{widths[0]}}  {d:<{widths[1]}}  {note}" for n, d, note in rows)


def run_target(options: argparse.Namespace) -> None:
    from .activation import emulate

    emulate(
        devices=options.devices,
        processes=options.processes,
        hosts=options.hosts,
        topology=options.topology,
    )
    target, args = options.target, options.args
    sys.argv = [target, *args]
    if options.module:
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
        runpy.run_path(target, run_name="__main__")


def main(argv: Sequence[str] | None = None) -> int:
    options = _parser().parse_args(argv)
    if options.command == "topologies":
        print(list_topologies())
        return 0
    if options.timeout is not None:
        os.environ["XLASIM_TIMEOUT"] = str(options.timeout)
    if options.devices is None and not options.topology:
        options.devices = int(os.environ.get("XLASIM_DEVICES", 8))
    try:
        run_target(options)
    except XlasimError as error:
        print(f"xlasim: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    return 0
