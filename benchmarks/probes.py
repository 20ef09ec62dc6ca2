"""Worker: the non-collective measures, each in a fresh process of its own.

`python benchmarks/probes.py startup|dispatch|rss|accounting [--mode isolated|threads]` prints
one record.
A fresh process is the point: start-up must include starting the XLA runtime and the ranks
(threads, or the zygote and the worker processes forked from it), and memory must be the
world's, not what earlier measures left behind.

Functions run on ranks live at module level: isolated ranks receive them pickled by reference
(workers import this script as `__mp_main__`), and threads get the very same functions, so both
modes run identical code.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from common import add_mode_argument, emit, emulate

STARTUP_DEVICES = 8
DISPATCH_DEVICES = 8
DISPATCH_WARMUP, DISPATCH_RUNS = 20, 300
RSS_DEVICES = 64
TINY_ELEMENTS = 1024  # a 4 KB float32 all_reduce
PROC = Path("/proc")


def noop(rank: int) -> None:
    """The launched function of the start-up and dispatch probes: the launch cost alone."""


def tiny_all_reduce(rank: int) -> None:
    """A rank's first collective: a 4 KB all_reduce, synced so it has really run."""
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm

    import xlasim

    x = torch.ones(TINY_ELEMENTS, device=torch.device(xlasim.current().device))
    xm.all_reduce(xm.REDUCE_SUM, x)
    torch_xla.sync(wait=True)


def startup(mode: str) -> dict:
    """Seconds from `xlasim.emulate(8)` to the end of the first `world.run`, in a fresh process.

    `import xlasim` imports no torch (timed apart, `import_s`); `emulate` imports torch and
    torch_xla, and in isolated mode starts the zygote first, whose own imports run meanwhile.
    So `xlasim_s` holds the imports any torch_xla program pays (alone: `emulate_s` in threads
    mode) and `ranks_s`, from the end of `emulate` to the first run done: the rank threads, or
    waiting for the zygote and forking the worker processes from it. The first collective
    (tracing, first transfers) is reported apart too.
    """
    began = time.perf_counter()
    import xlasim

    imported = time.perf_counter()
    emulate(STARTUP_DEVICES, mode)
    emulated = time.perf_counter()
    world = xlasim.world()
    world.run(noop)
    ready = time.perf_counter()
    world.run(tiny_all_reduce)
    return {
        "op": "startup",
        "mode": mode,
        "devices": STARTUP_DEVICES,
        "topology": world.topology.describe(),
        "xlasim_s": ready - imported,
        "import_s": imported - began,
        "emulate_s": emulated - imported,
        "ranks_s": ready - emulated,
        "first_all_reduce_s": time.perf_counter() - ready,
    }


def timed(fn: Callable[[], object]) -> float:
    """Wall seconds of one call: each dispatch sample is one run, so the median means something."""
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def dispatch(mode: str) -> dict:
    """Median seconds of `world.run(noop)` on a warm world of 8: the launch cost alone."""
    import xlasim

    emulate(DISPATCH_DEVICES, mode)
    world = xlasim.world()
    world.run(tiny_all_reduce)

    def run_noop() -> object:
        return world.run(noop)

    for _ in range(DISPATCH_WARMUP):
        run_noop()
    samples = sorted(timed(run_noop) for _ in range(DISPATCH_RUNS))
    return {
        "op": "dispatch",
        "mode": mode,
        "devices": DISPATCH_DEVICES,
        "topology": world.topology.describe(),
        "xlasim_s": statistics.median(samples),
        "p90_s": samples[int(0.9 * len(samples))],
        "runs": DISPATCH_RUNS,
    }


ACCOUNTING_CALLS, ACCOUNTING_ROUNDS = 50, 10


def timed_all_reduces(rank: int, accounting: bool) -> float:
    """Median seconds of a 4 KB all_reduce step on this rank (the collective, then the step
    marker that runs it, as the collectives benchmark times it), HBM accounting on or off in
    its process (xlasim/tpu/memory.py). The step marker is where the ledger scans the youngest
    objects; timed without it, the ledger looked free (1.06x) where a threads-mode step paid
    1.4-1.75x."""
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm

    import xlasim
    from xlasim.tpu import memory

    memory.set_accounting(accounting)
    x = torch.ones(TINY_ELEMENTS, device=torch.device(xlasim.current().device))
    torch_xla.sync(wait=True)

    def step() -> None:
        xm.all_reduce(xm.REDUCE_SUM, x)
        torch_xla.sync(wait=True)

    samples = sorted(timed(step) for _ in range(ACCOUNTING_CALLS))
    xm.rendezvous("accounting measured")  # ranks that are threads share the switch
    memory.set_accounting(True)
    return statistics.median(samples)


def timed_checks(rank: int) -> float:
    """Median seconds of the ledger's check before a collective (its floor), on this rank."""
    import torch

    import xlasim
    from xlasim.tpu import memory

    device = xlasim.current().device
    x = torch.ones(TINY_ELEMENTS, device=torch.device(device))
    return statistics.median(
        timed(lambda: memory.before_execution(device, [x])) for _ in range(ACCOUNTING_CALLS)
    )


def accounting(mode: str) -> dict:
    """A 4 KB all_reduce on 8 ranks with the HBM ledger on and off, alternated in one warm
    world: the ledger's cost, as the median of each round's on / off ratio (a round's two
    halves run back to back: a shared machine's load drifts less within a round than across
    rounds). The order flips from round to round (on, off, off, on, ...): whichever ran first
    in a round was up to 6% slower with the ledger on in both (2026-11-26), more than the
    ledger costs."""
    import xlasim

    emulate(DISPATCH_DEVICES, mode)
    world = xlasim.world()
    world.run(tiny_all_reduce)
    samples: dict[bool, list[float]] = {True: [], False: []}
    for round_index in range(ACCOUNTING_ROUNDS):
        for accounting in (True, False) if round_index % 2 == 0 else (False, True):
            samples[accounting].append(
                statistics.median(world.run(timed_all_reduces, (accounting,)))
            )
    on, off = samples[True], samples[False]
    return {
        "check_s": statistics.median(world.run(timed_checks)),
        "op": "all_reduce_accounting",
        "mode": mode,
        "devices": DISPATCH_DEVICES,
        "bytes": TINY_ELEMENTS * 4,
        "topology": world.topology.describe(),
        "xlasim_s": statistics.median(on),
        "without_accounting_s": statistics.median(off),
        "accounting_over_off": statistics.median(a / b for a, b in zip(on, off)),
    }


def kib_field(path: Path, field: str) -> int:
    """A `kB` field of a /proc status-like file, in bytes."""
    with path.open() as lines:
        for line in lines:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def parents() -> dict[int, int]:
    """Every visible process's parent: the process tree is only stored child -> parent."""
    tree = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        # `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
        tree[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    return tree


def descendants(root: int) -> list[int]:
    """`root` and every process below it (worker processes are the forkserver's children)."""
    tree = parents()
    found, frontier = [root], [root]
    while frontier:
        frontier = [pid for pid, parent in tree.items() if parent in frontier]
        found += frontier
    return found


def tree_memory(pids: list[int]) -> tuple[int, int, int]:
    """(summed Pss, summed private bytes, processes read) over `pids`.

    Proportional set size counts a page shared by k processes 1/k in each, so the sum is what
    the tree holds, where a sum of RSS would count the zygote's pages once per worker. Pages
    shared with processes outside the tree (other torch programs on a shared machine map the
    same libraries) are split with them too, so the private sum, a floor, is reported beside it.
    """
    pss = private = counted = 0
    for pid in pids:
        rollup = PROC / str(pid) / "smaps_rollup"
        try:
            pss += kib_field(rollup, "Pss")
            private += kib_field(rollup, "Private_Clean") + kib_field(rollup, "Private_Dirty")
        except (OSError, KeyError):  # exited meanwhile
            continue
        counted += 1
    return pss, private, counted


def refused(error: Exception, mode: str) -> dict:
    """The record of a world xlasim declined to start, with the count it says fits."""
    import xlasim

    fits = re.search(r"holds at most (\d+)", str(error))
    return {
        "op": "rss",
        "mode": mode,
        "devices": RSS_DEVICES,
        "error": f"{type(error).__name__}: {error}",
        "largest_fit": int(fits.group(1)) if fits else None,
        "max_devices": xlasim.max_devices(threaded=mode == "threads"),
    }


def rss(mode: str) -> dict:
    """Memory of a world of 64 cores after one 4 KB all_reduce: this process's RSS and peak,
    and the summed Pss of this process and all its descendants (zygote, workers)."""
    import xlasim

    try:
        emulate(RSS_DEVICES, mode)
    except xlasim.DeviceCountError as error:
        return refused(error, mode)
    world = xlasim.world()
    world.run(tiny_all_reduce)
    pss, private, processes = tree_memory(descendants(os.getpid()))
    status = PROC / "self" / "status"
    return {
        "op": "rss",
        "mode": mode,
        "devices": RSS_DEVICES,
        "topology": world.topology.describe(),
        "rss_bytes": kib_field(status, "VmRSS"),
        "hwm_bytes": kib_field(status, "VmHWM"),
        "pss_bytes": pss,
        "private_bytes": private,
        "processes": processes,
    }


PROBES: dict[str, Callable[[str], dict]] = {
    "startup": startup,
    "dispatch": dispatch,
    "rss": rss,
    "accounting": accounting,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("probe", choices=sorted(PROBES))
    add_mode_argument(parser)
    args = parser.parse_args()
    emit(PROBES[args.probe](args.mode))


if __name__ == "__main__":
    main()
