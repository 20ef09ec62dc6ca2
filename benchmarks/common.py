"""What a collective measurement is, shared by the orchestrator and both worker kinds.

The emulated and the gloo workers must time exactly the same thing (same buffer sizes, same
iteration counts, same start and end points) or their ratio means nothing, so every such choice
lives here once. Workers run in their own processes (the XLA device count is fixed per process,
gloo needs one process per rank) and report through tagged JSON lines on stdout.

xlasim has two modes, and every xlasim measure is taken in both, in the same run: `isolated`
(the default of `xlasim.emulate(devices=N)`: one worker process per core, as on TPU v4+) and
`threads` (`processes=1`: every core a thread of one process, the fast mode).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

OPS = ("all_reduce", "all_gather", "reduce_scatter")
#: xlasim's modes, in the order they are measured: the default first.
MODES = ("isolated", "threads")
KIB, MIB = 2**10, 2**20
SIZES = (4 * KIB, MIB, 16 * MIB)
FLOAT32_BYTES = 4
#: A block's calls handle about this many bytes summed over ranks (within the clamp below), so
#: small sizes get enough calls to rise above wake-up noise, and large ones do not take minutes
#: on 32 gloo processes.
BLOCK_BYTES = 2**27
MIN_ITERATIONS, MAX_ITERATIONS = 5, 30
WARMUP_CALLS = 2
MEMCPY_SAMPLE_BYTES = 16 * MIB
MEMCPY_REPEATS = 5
RESULT_TAG = "@@xlasim-bench "


@dataclass(frozen=True)
class Plan:
    """How one (op, size, N) case is timed: warm-up calls, then `repeats` blocks of calls."""

    warmup: int
    iterations: int
    repeats: int


def plan(nbytes: int, devices: int, repeats: int) -> Plan:
    """The same plan for xlasim and gloo, so both average over the same number of calls."""
    iterations = BLOCK_BYTES // (nbytes * devices)
    return Plan(WARMUP_CALLS, max(MIN_ITERATIONS, min(MAX_ITERATIONS, iterations)), repeats)


def buffer_elements(op: str, nbytes: int, devices: int) -> tuple[int, int]:
    """(input, output) float32 elements per rank; `nbytes` is the op's full buffer.

    As in nccl-tests: all_reduce reduces `nbytes` per rank; all_gather assembles `nbytes` from
    N shards of nbytes/N; reduce_scatter reduces `nbytes` and leaves nbytes/N on each rank.
    This keeps every rank's memory at about `nbytes`, whatever N.
    """
    full = nbytes // FLOAT32_BYTES
    shard = full // devices
    return {
        "all_reduce": (full, full),
        "all_gather": (shard, full),
        "reduce_scatter": (full, shard),
    }[op]


def moved_bytes(op: str, nbytes: int, devices: int) -> int:
    """Bytes any correct implementation must read plus write: every rank's input read once, and
    each distinct result written once.

    all_reduce (N+1)*B, all_gather 2*B, reduce_scatter (N+1)*B. Ranks may share one immutable
    result buffer (xlasim hands every rank a view of the same host result), so copies of the
    result per rank are not counted: they are a cost of an implementation, not of the op.
    """
    inputs, outputs = buffer_elements(op, nbytes, devices)
    distinct_result = outputs * (devices if op == "reduce_scatter" else 1)
    return (devices * inputs + distinct_result) * FLOAT32_BYTES


def memcpy_seconds(moved: int) -> float:
    """Seconds one thread's `dst.copy_(src)` takes to move `moved` bytes (half read, half written).

    The bound is measured at the op's own volume rather than derived from one large-buffer
    bandwidth: a working set that fits in the last-level cache (32 MB here) copies twice as
    fast as one that does not, and the op enjoys the same. One thread, because torch's
    multi-threaded copy stalls for a scheduler slice whenever another process holds a core (on
    a shared 2-core machine: 2 GB/s instead of 45), which would make the bound noise. Small
    copies are repeated so each sample lasts about a millisecond; the median of 5 is kept.
    """
    import torch

    source = torch.ones(max(1, moved // 2 // FLOAT32_BYTES))
    target = torch.empty_like(source)
    inner = max(1, min(1000, MEMCPY_SAMPLE_BYTES // (moved // 2)))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        target.copy_(source)
        samples = []
        for _ in range(MEMCPY_REPEATS):
            began = time.perf_counter()
            for _ in range(inner):
                target.copy_(source)
            samples.append((time.perf_counter() - began) / inner)
    finally:
        torch.set_num_threads(threads)
    return statistics.median(samples)


def expected_ends(op: str, devices: int) -> tuple[float, float]:
    """First and last element of every rank's result when rank r's input is all r + 1."""
    total = devices * (devices + 1) / 2
    return (1.0, float(devices)) if op == "all_gather" else (total, total)


def per_call_seconds(
    spans: Sequence[Sequence[tuple[float, float]]], iterations: int
) -> list[float]:
    """Seconds per call of each block, from every rank's (start, end) of that block.

    A block runs from the first rank leaving the start barrier to the last rank holding its
    result, so a slow rank counts, as it does in a training step.
    """
    blocks = zip(*spans)
    return [(max(e for _, e in block) - min(s for s, _ in block)) / iterations for block in blocks]


def collective_record(
    op: str, nbytes: int, devices: int, the_plan: Plan, blocks: list[float]
) -> dict[str, Any]:
    """What a worker reports for one case: the median block and every block, for the record."""
    return {
        "op": op,
        "bytes": nbytes,
        "devices": devices,
        "seconds": statistics.median(blocks),
        "blocks_s": blocks,
        "iterations": the_plan.iterations,
        "repeats": the_plan.repeats,
    }


def emulate(devices: int, mode: str) -> Any:
    """Start emulation in `mode`: `isolated` is `xlasim.emulate(devices=N)` exactly as a user
    writes it (whatever the default is), `threads` asks for one process."""
    import xlasim

    if mode == "threads":
        return xlasim.emulate(devices=devices, processes=1)
    topology = xlasim.emulate(devices=devices)
    if topology.processes != devices:  # XLASIM_PROCESSES in the environment, or a new default
        raise RuntimeError(f"isolated mode wanted a process per core, got {topology.describe()}")
    return topology


def add_mode_argument(parser: argparse.ArgumentParser) -> None:
    """`--mode`, for the workers that measure xlasim (one mode per process: the slice is chosen
    once per process)."""
    parser.add_argument("--mode", choices=MODES, default=MODES[0])


def emit(record: dict[str, Any]) -> None:
    """Hand a record to the orchestrator at once, so a worker killed later loses only the rest."""
    print(RESULT_TAG + json.dumps(record), flush=True)


def parse_records(stdout: str) -> list[dict[str, Any]]:
    """The records in a worker's stdout; any other output (library logs) is ignored."""
    return [
        json.loads(line[len(RESULT_TAG) :])
        for line in stdout.splitlines()
        if line.startswith(RESULT_TAG)
    ]


def worker_arguments(description: str, modes: bool = False) -> argparse.Namespace:
    """The command line both collective workers take from the orchestrator (`--mode` for the
    xlasim one)."""
    parser = argparse.ArgumentParser(description=description)
    if modes:
        add_mode_argument(parser)
    parser.add_argument("--devices", type=int, required=True)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    parser.add_argument("--repeats", type=int, default=5)
    return parser.parse_args()
