"""Worker: the non-collective measures, each in a fresh process of its own.

`python benchmarks/probes.py startup|dispatch|rss` prints one record. A fresh process is the
point: start-up must include starting the XLA runtime and the rank threads, and resident memory
must be the world's, not what earlier measures left behind.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from common import emit

STARTUP_DEVICES = 8
DISPATCH_DEVICES = 8
DISPATCH_WARMUP, DISPATCH_RUNS = 20, 300
RSS_DEVICES = 64
TINY_ELEMENTS = 1024  # a 4 KB float32 all_reduce


def tiny_all_reduce(rank: int) -> None:
    """A rank's first collective: a 4 KB all_reduce, synced so it has really run."""
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm

    import xlasim

    x = torch.ones(TINY_ELEMENTS, device=torch.device(xlasim.current().device))
    xm.all_reduce(xm.REDUCE_SUM, x)
    torch_xla.sync(wait=True)


def startup() -> dict:
    """Seconds from `xlasim.emulate(8)` to the end of the first `world.run`, in a fresh process.

    Importing xlasim (which imports torch) is timed apart; `emulate` imports torch_xla, so that
    is inside `xlasim_s`. The first collective (tracing, first transfers) is reported apart too.
    """
    began = time.perf_counter()
    import xlasim

    imported = time.perf_counter()
    xlasim.emulate(devices=STARTUP_DEVICES)
    world = xlasim.world()
    world.run(lambda rank: None)
    ready = time.perf_counter()
    world.run(tiny_all_reduce)
    return {
        "op": "startup",
        "devices": STARTUP_DEVICES,
        "topology": world.topology.describe(),
        "xlasim_s": ready - imported,
        "import_s": imported - began,
        "first_all_reduce_s": time.perf_counter() - ready,
    }


def timed(fn: Callable[[], object]) -> float:
    """Wall seconds of one call: each dispatch sample is one run, so the median means something."""
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def dispatch() -> dict:
    """Median seconds of `world.run(lambda r: None)` on a warm world of 8: the launch cost alone."""
    import xlasim

    xlasim.emulate(devices=DISPATCH_DEVICES)
    world = xlasim.world()
    world.run(tiny_all_reduce)

    def noop() -> object:
        return world.run(lambda rank: None)

    for _ in range(DISPATCH_WARMUP):
        noop()
    samples = sorted(timed(noop) for _ in range(DISPATCH_RUNS))
    return {
        "op": "dispatch",
        "devices": DISPATCH_DEVICES,
        "topology": world.topology.describe(),
        "xlasim_s": statistics.median(samples),
        "p90_s": samples[int(0.9 * len(samples))],
        "runs": DISPATCH_RUNS,
    }


def status_bytes(field: str) -> int:
    """A `kB` field of /proc/self/status, in bytes."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def rss() -> dict:
    """Resident memory of a process holding a world of 64 cores after one 4 KB all_reduce."""
    import xlasim

    xlasim.emulate(devices=RSS_DEVICES)
    world = xlasim.world()
    world.run(tiny_all_reduce)
    return {
        "op": "rss",
        "devices": RSS_DEVICES,
        "topology": world.topology.describe(),
        "rss_bytes": status_bytes("VmRSS"),
        "hwm_bytes": status_bytes("VmHWM"),
    }


PROBES: dict[str, Callable[[], dict]] = {"startup": startup, "dispatch": dispatch, "rss": rss}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("probe", choices=sorted(PROBES))
    emit(PROBES[parser.parse_args().probe]())


if __name__ == "__main__":
    main()
