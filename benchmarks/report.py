"""The table on screen and issue 6's targets, judged on ratios from one run.

The machine is shared and its speed drifts, so each target is a ratio against a peer measured
in the same run (gloo, the memory-copy bound) or an absolute bound far from the noise
(milliseconds of dispatch, GiB of memory). Nothing here asserts: a miss is reported, not raised.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common import KIB, MIB

Record = dict[str, Any]
GIB = 2**30
#: Last-level cache of the reference machine: copies of less than this run from cache.
LLC_BYTES = 32 * MIB


@dataclass(frozen=True)
class Target:
    """One line of the issue: which record, which figure of it, and the bound it must meet."""

    label: str
    op: str
    nbytes: int | None
    devices: int
    metric: str
    limit: float
    at_least: bool
    show: Callable[[float], str]

    def find(self, records: list[Record]) -> Record | None:
        return next(
            (
                r
                for r in records
                if (r["op"], r["bytes"], r["devices"]) == (self.op, self.nbytes, self.devices)
            ),
            None,
        )

    def judge(self, record: Record | None) -> tuple[str, float | None]:
        """PASS or MISS with the measured value; N/A when the run did not measure it."""
        value = None if record is None else record.get(self.metric)
        if value is None:
            return "N/A", None
        meets = (operator.ge if self.at_least else operator.lt)(value, self.limit)
        return ("PASS" if meets else "MISS"), value

    def bound(self) -> str:
        return f"{'>=' if self.at_least else '<'} {self.show(self.limit)}"


def times(value: float) -> str:
    return f"{value:.1f}x"


def millis(value: float) -> str:
    return f"{value * 1e3:.2f} ms"


def gibibytes(value: float) -> str:
    return f"{value / GIB:.2f} GiB"


TARGETS = (
    Target(
        "all_reduce 4 KB, N=8: gloo time / xlasim time",
        "all_reduce",
        4 * KIB,
        8,
        "gloo_over_xlasim",
        10,
        True,
        times,
    ),
    Target(
        "all_reduce 16 MB, N=8: gloo time / xlasim time",
        "all_reduce",
        16 * MIB,
        8,
        "gloo_over_xlasim",
        2,
        True,
        times,
    ),
    Target(
        "all_reduce 16 MB, N=8: xlasim time / memcpy bound",
        "all_reduce",
        16 * MIB,
        8,
        "xlasim_over_bound",
        3,
        False,
        times,
    ),
    Target(
        "dispatch, warm world of 8: world.run(lambda r: None)",
        "dispatch",
        None,
        8,
        "xlasim_s",
        5e-3,
        False,
        millis,
    ),
    Target(
        "dispatch, pytest: marked test - plain test",
        "pytest_dispatch",
        None,
        8,
        "xlasim_s",
        5e-3,
        False,
        millis,
    ),
    Target(
        "world of 64 cores after one all_reduce: peak RSS (VmHWM)",
        "rss",
        None,
        64,
        "hwm_bytes",
        4 * GIB,
        False,
        gibibytes,
    ),
)


def judge_all(records: list[Record]) -> list[Record]:
    """Every target's verdict, for the screen; each is also added to the `targets` list of the
    record it judges, so the --json records carry their own verdicts."""
    verdicts = []
    for target in TARGETS:
        record = target.find(records)
        status, value = target.judge(record)
        verdict = {
            "target": target.label,
            "value": value,
            "bound": target.bound(),
            "status": status,
            "shown": "-" if value is None else target.show(value),
        }
        if record is not None:
            record.setdefault("targets", []).append(verdict)
        verdicts.append(verdict)
    return verdicts


def size_label(nbytes: int) -> str:
    return f"{nbytes // MIB} MB" if nbytes >= MIB else f"{nbytes // KIB} KB"


def cell(value: float | None, show: Callable[[float], str]) -> str:
    return "-" if value is None else show(value)


def collective_table(records: list[Record]) -> list[str]:
    """One row per (op, size, N): both times, the bound and the two ratios."""
    rows = [
        f"{'op':<15}{'size':>6}{'N':>4}{'xlasim':>12}{'gloo':>12}{'memcpy bound':>14}{'gloo/xlasim':>13}{'xlasim/bound':>14}"
    ]
    for r in records:
        if r["bytes"] is None:
            continue
        rows.append(
            f"{r['op']:<15}{size_label(r['bytes']):>6}{r['devices']:>4}"
            f"{cell(r['xlasim_s'], millis):>12}{cell(r['gloo_s'], millis):>12}"
            f"{cell(r['memcpy_bound_s'], millis):>14}{cell(r.get('gloo_over_xlasim'), times):>13}"
            f"{cell(r.get('xlasim_over_bound'), times):>14}"
        )
    return rows


def bandwidth_range(records: list[Record], beyond_cache: bool) -> str:
    """min-max GB/s of the bounds' copies, for cases moving more (or not more) than the LLC."""
    values = [
        r["memcpy_Bps"]
        for r in records
        if r.get("memcpy_Bps") and (r["moved_bytes"] > LLC_BYTES) == beyond_cache
    ]
    return f"{min(values) / 1e9:.0f}-{max(values) / 1e9:.0f} GB/s" if values else "-"


def memcpy_line(records: list[Record]) -> str:
    """The bandwidths the bounds imply, large cases apart: small ones run in cache."""
    megabytes = LLC_BYTES // MIB
    return (
        "memcpy bound: torch copy_ of the bytes each op must move, timed just before it; "
        f"read+write bandwidth {bandwidth_range(records, True)} for cases moving > {megabytes} MB, "
        f"{bandwidth_range(records, False)} (in cache) for the others"
    )


def other_line(r: Record) -> str | None:
    """How a non-collective record reads on screen."""
    op = r["op"]
    if op == "startup":
        return (
            f"start-up, world of 8 (emulate -> first world.run done, fresh process): {r['xlasim_s']:.2f} s"
            f"  [+ import xlasim/torch {r['import_s']:.2f} s; first 4 KB all_reduce {r['first_all_reduce_s'] * 1e3:.0f} ms]"
        )
    if op == "dispatch":
        return f"dispatch, warm world of 8, world.run(lambda r: None): median {millis(r['xlasim_s'])}, p90 {millis(r['p90_s'])}"
    if op == "pytest_dispatch":
        return (
            f"dispatch per pytest test ({r['tests']} marked vs plain): {millis(r['xlasim_s'])}"
            f"  [tests took {r['marked_span_s']:.2f} s vs {r['plain_span_s']:.2f} s;"
            f" whole runs {r['marked_run_s']:.1f} s vs {r['plain_run_s']:.1f} s]"
        )
    if op == "rss":
        return f"memory, world of 64 after one all_reduce: VmRSS {gibibytes(r['rss_bytes'])}, VmHWM {gibibytes(r['hwm_bytes'])}"
    if op == "suite":
        failed = "".join(f"\n    {line}" for line in r["failures"])
        return f"suite, pytest --xla-devices=8: {r['xlasim_s']:.1f} s wall ({r['summary']}){failed}"
    return None


def run_line(r: Record) -> str:
    load = ", ".join(f"{x:.1f}" for x in r["load_average"])
    mode = "quick" if r["quick"] else "full"
    return f"xlasim {r['commit']}, {mode} run, {r['cpus']} CPUs, load average at start {load}"


def render(records: list[Record], verdicts: list[Record], notes: list[str]) -> str:
    """The whole screen report: collectives, the other measures, the targets, any failures."""
    lines = [run_line(records[0]), ""] if records and records[0]["op"] == "run" else []
    lines.append(
        "Collectives, float32, median time per call (all ranks in -> all ranks hold the result)"
    )
    lines += collective_table(records)
    lines.append(memcpy_line(records))
    lines += ["", "Other measures"]
    lines += [f"  {line}" for r in records if (line := other_line(r))]
    lines += ["", "Targets (issue 6)"]
    lines += [
        f"  {v['status']:<5} {v['target']}: {v['shown']}  (target {v['bound']})" for v in verdicts
    ]
    if notes:
        lines += ["", "Not measured / failed"] + [f"  {note}" for note in notes]
    return "\n".join(lines)
