"""`xlasim trace diff A B` and `xlasim trace plot DIR -o timeline.png`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import canonical


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="trace_command", required=True)
    diff = actions.add_parser(
        "diff",
        help="the first place two traces' collectives differ (exit 0 when they do not)",
    )
    diff.add_argument("first", help="a trace directory or its collectives.txt")
    diff.add_argument("second", help="a trace directory or its collectives.txt")
    plot = actions.add_parser("plot", help="a PNG of ranks against time (needs matplotlib)")
    plot.add_argument("directory", help="a trace directory (xlasim run --trace DIR)")
    plot.add_argument("-o", "--output", default="timeline.png", help="the PNG to write")


def run_trace(options: argparse.Namespace) -> int:
    if options.trace_command == "diff":
        return diff(options.first, options.second)
    return plot(options.directory, options.output)


def diff(first: str, second: str) -> int:
    """Print the first divergence of two traces; 1 when there is one, 0 when they agree.

    Args:
        first: a trace directory or its collectives.txt, as typed (the report names it so).
        second: the trace compared with it, in either form.
    """
    found = canonical.first_divergence(canonical.read(first), canonical.read(second))
    if found is None:
        print(f"the traces' collectives are the same ({first}, {second})")
        return 0
    print(found.describe((first, second)))
    return 1


def plot(directory: str, output: str) -> int:
    """Draw a recorded trace as a PNG of ranks against time; 0 when written, 2 when it cannot
    be (no matplotlib, or nothing recorded there).

    Args:
        directory: a trace directory (`xlasim run --trace DIR`) holding recorded events.
        output: the PNG file to write.
    """
    from . import plot as plotting
    from . import timeline

    if not plotting.available():
        print("xlasim: plotting needs matplotlib: pip install 'xlasim[trace]'", file=sys.stderr)
        return 2
    if not (Path(directory) / "events").is_dir():
        print(f"xlasim: {directory} holds no recorded events", file=sys.stderr)
        return 2
    plotting.draw(timeline.load(directory), output)
    print(f"wrote {output}")
    return 0
