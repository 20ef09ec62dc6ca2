"""`xlasim run [--devices N] script.py [args...]`: run an unmodified torch_xla script emulated.

The script runs as `__main__` in this process after emulation is set up, so its `xmp.spawn` /
`torch_xla.launch` calls land on the emulated world.
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
    return parser


def run_target(devices: int, target: str, args: Sequence[str], as_module: bool) -> None:
    from .activation import emulate

    emulate(devices=devices)
    sys.argv = [target, *args]
    if as_module:
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
        runpy.run_path(target, run_name="__main__")


def main(argv: Sequence[str] | None = None) -> int:
    options = _parser().parse_args(argv)
    if options.timeout is not None:
        os.environ["XLASIM_TIMEOUT"] = str(options.timeout)
    devices = options.devices or int(os.environ.get("XLASIM_DEVICES", 8))
    try:
        run_target(devices, options.target, options.args, options.module)
    except XlasimError as error:
        print(f"xlasim: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    return 0
