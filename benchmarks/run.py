"""Benchmarks of issues 6, 11, 24 and 26: emulated collectives, start-up, dispatch, memory,
compilation and the cost of tracing, in both xlasim modes (isolated ranks, the default, and
threads), each against peers from the same run.

    python benchmarks/run.py [--quick] [--suite] [--compile-only] [--coverage-only [BEFORE]]
                             [--races] [--json PATH]

Every measure runs in a bounded child process (see processes.py); this process collects the
records and prints the table and the targets. The machine may be shared, so figures are judged
as ratios against peers measured in this same run: for each N, xlasim isolated, then xlasim
threads, then gloo, back to back; a memcpy of the bytes each case must move, timed in the xlasim
worker just before the case; and each probe in both modes, one right after the other.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import arithmetic
import coverage_cost
import pods
import pytest_runs
import races
import spmd
from common import MODES, OPS, SIZES, moved_bytes, parse_records
from processes import Finished, run_script
from report import judge_all, render

Record = dict[str, Any]
#: Bounds on each child; the worst case of a full run stays under ~25 minutes in practice.
EMULATED_TIMEOUT_S = {"threads": 300.0, "isolated": 600.0}
GLOO_TIMEOUT_S = {2: 180.0, 8: 240.0, 32: 420.0}
#: The memory probe starts 64 worker processes in isolated mode: a minute on a loaded machine.
PROBE_TIMEOUT_S = {"startup": 240.0, "dispatch": 240.0, "rss": 600.0, "accounting": 300.0}
PROBES = ("startup", "dispatch", "rss", "accounting")
#: The compile case (issue 24): one rank, then 8 in each mode, then 8 threads taking turns at
#: compiling (`--share`); a loaded machine needs minutes for each.
COMPILE_CASES = (
    (1, "isolated", False),
    (8, "isolated", False),
    (8, "threads", False),
    (8, "threads", True),
)
COMPILE_TIMEOUT_S = 900.0
TRACING_TIMEOUT_S = 600.0
#: What `isolated_over_threads` divides, by op (time, except for memory).
PEER_METRIC = {"rss": "pss_bytes"}


class Progress:
    """Elapsed-time progress lines on stderr, so a long run shows where it is."""

    def __init__(self) -> None:
        self.began = time.perf_counter()

    def __call__(self, message: str) -> None:
        print(f"[{time.perf_counter() - self.began:6.0f} s] {message}", file=sys.stderr, flush=True)


def run_record(quick: bool) -> Record:
    """Which xlasim was measured, on what machine: the core changes under a benchmark's feet."""
    repo = Path(__file__).resolve().parent.parent
    commit = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    changed = subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain", "--", "xlasim"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return complete(
        {
            "op": "run",
            "commit": commit + ("+uncommitted xlasim changes" if changed else ""),
            "quick": quick,
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
        }
    )


def worker_records(finished: Finished, what: str, notes: list[str]) -> list[Record]:
    """The records a child printed; a note when it did not finish cleanly."""
    if not finished.ok:
        notes.append(f"{what}: {finished.failure()}")
    return parse_records(finished.stdout)


def collective_runs(
    devices: int, repeats: int, notes: list[str], progress: Progress
) -> tuple[list[Record], list[Record]]:
    """The emulated workers (one per mode) and the gloo worker for one N, back to back."""
    arguments = ["--devices", str(devices), "--repeats", str(repeats)]
    emulated = []
    for mode in MODES:
        progress(f"xlasim collectives, N={devices}, {mode}")
        finished = run_script("emulated.py", [*arguments, "--mode", mode], EMULATED_TIMEOUT_S[mode])
        emulated += worker_records(finished, f"xlasim N={devices} {mode}", notes)
    progress(f"gloo collectives, N={devices} processes")
    timeout = GLOO_TIMEOUT_S.get(devices, max(GLOO_TIMEOUT_S.values()))
    gloo = worker_records(run_script("gloo.py", arguments, timeout), f"gloo N={devices}", notes)
    return emulated, gloo


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    return None if numerator is None or not denominator else numerator / denominator


def merge(devices: int, emulated: list[Record], gloo: list[Record]) -> list[Record]:
    """One record per (op, size, mode) with its time, gloo's, the memcpy bound and the ratios
    (each mode against the one gloo run and against its own bound)."""
    by_case = {(r["op"], r["bytes"]): r for r in gloo}
    merged = []
    for r in emulated:
        peer = by_case.get((r["op"], r["bytes"]), {})
        moved = moved_bytes(r["op"], r["bytes"], devices)
        bound = r["memcpy_bound_s"]
        merged.append(
            {
                "op": r["op"],
                "bytes": r["bytes"],
                "devices": devices,
                "mode": r["mode"],
                "topology": r["topology"],
                "xlasim_s": r["seconds"],
                "gloo_s": peer.get("seconds"),
                "memcpy_bound_s": bound,
                "gloo_over_xlasim": ratio(peer.get("seconds"), r["seconds"]),
                "xlasim_over_bound": ratio(r["seconds"], bound),
                "moved_bytes": moved,
                "memcpy_Bps": moved / bound,
                "gloo_topology": f"{devices} processes, torch.distributed gloo on loopback",
                "iterations": r["iterations"],
                "repeats": r["repeats"],
                "xlasim_blocks_s": r["blocks_s"],
                "gloo_blocks_s": peer.get("blocks_s"),
            }
        )
    return merged


def pair_modes(records: list[Record]) -> None:
    """Give each isolated record its threads peer's figure and `isolated_over_threads`: what
    isolation costs, measured back to back (time; summed Pss for memory)."""
    threads = {(r["op"], r["bytes"], r["devices"]): r for r in records if r["mode"] == "threads"}
    for r in records:
        peer = threads.get((r["op"], r["bytes"], r["devices"]))
        if r["mode"] != "isolated" or peer is None:
            continue
        if r.get("timed_out") or peer.get("timed_out"):  # a suite cut short: no fair ratio
            continue
        metric = PEER_METRIC.get(r["op"], "xlasim_s")
        r[f"threads_{metric.removeprefix('xlasim_')}"] = peer.get(metric)
        r["isolated_over_threads"] = ratio(r.get(metric), peer.get(metric))


def complete(record: Record) -> Record:
    """A non-collective record with the keys every record has (null where they do not apply)."""
    base = dict.fromkeys(
        ("op", "bytes", "devices", "mode", "topology", "xlasim_s", "gloo_s", "memcpy_bound_s")
    )
    return {**base, **record}


def probe_records(rounds: int, notes: list[str], progress: Progress) -> list[Record]:
    """Start-up, dispatch and memory probes and the pytest dispatch measure, each in both
    modes back to back."""
    records = []
    for probe in PROBES:
        for mode in MODES:
            progress(f"probe {probe}, {mode}")
            finished = run_script("probes.py", [probe, "--mode", mode], PROBE_TIMEOUT_S[probe])
            records += worker_records(finished, f"probe {probe} {mode}", notes)
    if pytest_runs.plugin_available():
        for mode in MODES:
            progress(f"pytest dispatch (marked vs plain tests), {mode}")
            records += guarded(
                lambda mode=mode: pytest_runs.dispatch(rounds, mode),
                f"pytest dispatch {mode}",
                notes,
            )
    return [complete(r) for r in records]


def compile_records(notes: list[str], progress: Progress) -> list[Record]:
    """The issue's training script on 1 rank and on 8 (both modes), back to back, each in a
    fresh process; every 8-rank record gets `over_one_rank`, its time over the 1-rank run's."""
    records = []
    for devices, mode, share in COMPILE_CASES:
        shared = ", compilations shared" if share else ""
        progress(f"compile case (MLP training), N={devices}, {mode}{shared}")
        arguments = ["--devices", str(devices), "--mode", mode] + (["--share"] if share else [])
        finished = run_script("compilation.py", arguments, COMPILE_TIMEOUT_S)
        records += worker_records(finished, f"compile case N={devices} {mode}{shared}", notes)
    one = next((r for r in records if r["devices"] == 1), None)
    for r in records:
        if one is not None and r["devices"] > 1:
            r["over_one_rank"] = ratio(r["xlasim_s"], one["xlasim_s"])
    return [complete(r) for r in records]


def tracing_records(notes: list[str], progress: Progress) -> list[Record]:
    """What tracing costs (issue 26): the 4 KB all_reduce in both modes and the demo's
    training, each on against off in one process (benchmarks/tracing.py)."""
    records = []
    for mode in MODES:
        progress(f"tracing on/off, 4 KB all_reduce, {mode}")
        finished = run_script("tracing.py", ["all_reduce", "--mode", mode], TRACING_TIMEOUT_S)
        records += worker_records(finished, f"tracing all_reduce {mode}", notes)
    progress("tracing on/off, demo training")
    finished = run_script("tracing.py", ["demo"], TRACING_TIMEOUT_S)
    records += worker_records(finished, "tracing demo", notes)
    return [complete(r) for r in records]


def suite_records(paths: list[str], notes: list[str], progress: Progress) -> list[Record]:
    """The repository's suite (or `paths` of it) in both modes, back to back (the slow part:
    ~15+ min each for the whole suite)."""
    records = []
    for mode in MODES:
        progress(f"suite: pytest --xla-devices=8 {' '.join(paths)}, {mode}")
        records += guarded(lambda mode=mode: pytest_runs.suite(mode, paths), f"suite {mode}", notes)
    return [complete(r) for r in records]


def coverage_records(
    before: Path | None, rounds: int, notes: list[str], progress: Progress
) -> list[Record]:
    """Issue 33: coverage's cost in each mode, and the plugin's per-test overhead with no tool
    on, for this checkout and `before` (another checkout: main, for a change's "before")."""
    progress(f"coverage: {' '.join(coverage_cost.SUBSET)} with and without --cov, both modes")
    records = guarded(coverage_cost.cost, "coverage cost", notes)
    for checkout in (pytest_runs.REPO, before) if before is not None else (pytest_runs.REPO,):
        progress(f"coverage: per-test overhead, no tool on, xlasim of {checkout}")
        try:
            records += coverage_cost.dispatch(checkout, rounds)
        except Exception as error:
            notes.append(f"per-test overhead ({checkout}): {error}")
    return [complete(r) for r in records]


def race_records(rounds: int, notes: list[str], progress: Progress) -> list[Record]:
    """Race detection on against off, and one schedule against a plain run (issue 27)."""
    progress("races: pytest tests/properties with and without --xla-races")
    records = guarded(races.detection, "race detection", notes)
    progress(f"races: one schedule of an 8-rank test against a plain run, best of {rounds}")
    records += guarded(lambda: races.exploration(rounds), "race schedule", notes)
    return [complete(r) for r in records]


def guarded(measure: Callable[[], Record], what: str, notes: list[str]) -> list[Record]:
    """Run an in-process measure; a failure becomes a note, not a lost run."""
    try:
        return [measure()]
    except Exception as error:
        notes.append(f"{what}: {error}")
        return []


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 2 and 8 only, 3 repeats (~7 min)")
    parser.add_argument(
        "--suite",
        nargs="*",
        metavar="PATH",
        help="also time pytest --xla-devices=8 on the repo suite, isolated and threads (~40 min), "
        "or on the PATHs given (e.g. --suite tests/properties tests/core)",
    )
    parser.add_argument(
        "--compile-only",
        action="store_true",
        help="only the compile case (issue 24): an MLP's training on 1 rank, then 8 in each mode",
    )
    parser.add_argument(
        "--races",
        action="store_true",
        help="also time race detection (tests/properties with and without --xla-races) and "
        "one exploration schedule of an 8-rank test (~10 min)",
    )
    parser.add_argument(
        "--coverage-only",
        nargs="?",
        const=True,
        metavar="BEFORE",
        help="only issue 33's measures: a suite subset with and without --cov in both modes, "
        "and the per-test overhead with no tool on, here and in the checkout BEFORE if given "
        "(~10 min)",
    )
    parser.add_argument(
        "--pods",
        action="store_true",
        help="also time a pod across namespaced machines: all_reduce against gloo between "
        "them, memory per machine (issue 28; needs root, ~3 min)",
    )
    parser.add_argument(
        "--json", type=Path, metavar="PATH", help="write the records as a JSON list"
    )
    return parser.parse_args()


def main() -> None:
    args = arguments()
    device_counts, repeats, rounds = ((2, 8), 3, 2) if args.quick else ((2, 8, 32), 5, 3)
    progress, notes = Progress(), []
    run = run_record(args.quick)
    if args.coverage_only:
        before = None if args.coverage_only is True else Path(args.coverage_only).resolve()
        finish([run, *coverage_records(before, 3, notes, progress)], notes, progress, args.json, 33)
        return
    if args.compile_only:
        finish([run, *compile_records(notes, progress)], notes, progress, args.json, issue=24)
        return
    collectives: list[Record] = []
    for devices in device_counts:
        emulated, gloo = collective_runs(devices, repeats, notes, progress)
        collectives += merge(devices, emulated, gloo)
    collectives.sort(
        key=lambda m: (
            OPS.index(m["op"]),
            SIZES.index(m["bytes"]),
            m["devices"],
            MODES.index(m["mode"]),
        )
    )
    records = [run, *collectives, *probe_records(rounds, notes, progress)]
    records += compile_records(notes, progress)
    records += tracing_records(notes, progress)
    if args.suite is not None:
        records += suite_records(args.suite, notes, progress)
    if args.races:
        records += race_records(rounds, notes, progress)
    if args.pods:
        records += [complete(r) for r in pods.records(notes, progress)]
    records += [complete(r) for r in spmd.records(notes, progress)]
    records += [complete(r) for r in arithmetic.records(notes, progress)]
    finish(records, notes, progress, args.json)


def finish(
    records: list[Record],
    notes: list[str],
    progress: Progress,
    path: Path | None,
    issue: int | None = None,
) -> None:
    """Pair the modes, judge the targets (only `issue`'s, when given), print the report and
    write the JSON records."""
    pair_modes(records)
    verdicts = [v for v in judge_all(records) if issue is None or v["issue"] == issue]
    progress("done")
    print(render(records, verdicts, notes))
    print("\n".join(spmd.lines(records) + arithmetic.lines(records) + pods.lines(records)))
    if path:
        path.write_text(json.dumps(records, indent=1) + "\n")


if __name__ == "__main__":
    main()
