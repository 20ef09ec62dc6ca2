"""The table on screen and the targets of issues 6, 11 and 24, judged on ratios from one run.

The machine is shared and its speed drifts, so each target is a ratio against a peer measured
in the same run (gloo, the memory-copy bound, the other xlasim mode) or an absolute bound far
from the noise (seconds of start-up, milliseconds of dispatch, GiB of memory). Nothing here
asserts: a miss is reported, not raised.

Issue 6's targets were set when threads were xlasim's only mode; they are judged in both modes
now, since isolated ranks are the default a user gets.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import coverage_cost
import races
from common import KIB, MIB, MODES

Record = dict[str, Any]
GIB = 2**30
#: Last-level cache of the reference machine: copies of less than this run from cache.
LLC_BYTES = 32 * MIB
RELATIONS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}


@dataclass(frozen=True)
class Target:
    """One line of an issue: which record, which figure of it, and the bound it must meet.

    `optional` targets (the suite) are left off the screen when the run has no record for them:
    only --suite measures them, so N/A there would read as a failure.
    """

    issue: int
    label: str
    op: str
    nbytes: int | None
    devices: int
    mode: str | None
    metric: str
    relation: str
    limit: float
    show: Callable[[float], str]
    optional: bool = False

    def find(self, records: list[Record]) -> Record | None:
        wanted = (self.op, self.nbytes, self.devices, self.mode)
        return next(
            (r for r in records if (r["op"], r["bytes"], r["devices"], r["mode"]) == wanted),
            None,
        )

    def judge(self, record: Record | None) -> tuple[str, float | None, str | None]:
        """PASS or MISS with the measured value; N/A when the run did not measure it.

        A world xlasim refused to start is judged on its error: the memory target asks for the
        world to fit or for a clear error that names the largest count that fits.
        """
        if record is not None and record.get("error"):
            fits = record.get("largest_fit")
            shown = f"refused, at most {fits} fit" if fits else "refused without a count"
            return ("PASS" if fits else "MISS"), None, shown
        value = None if record is None else record.get(self.metric)
        if value is None:
            return "N/A", None, None
        meets = RELATIONS[self.relation](value, self.limit)
        return ("PASS" if meets else "MISS"), value, None

    def bound(self) -> str:
        return f"{self.relation} {self.show(self.limit)}"


def times(value: float) -> str:
    """A ratio: two decimals below 10 (targets such as 1.05x must not print as 1.1x)."""
    return f"{value:.2f}x" if abs(value) < 10 else f"{value:.1f}x"


def millis(value: float) -> str:
    return f"{value * 1e3:.2f} ms"


def seconds(value: float) -> str:
    return f"{value:.2f} s"


def gibibytes(value: float) -> str:
    return f"{value / GIB:.2f} GiB"


def issue6_targets(mode: str) -> list[Target]:
    """Issue 6's targets, for one mode."""
    tag = f"[{mode}] "
    return [
        Target(
            6,
            tag + "all_reduce 4 KB, N=8: gloo time / xlasim time",
            "all_reduce",
            4 * KIB,
            8,
            mode,
            "gloo_over_xlasim",
            ">=",
            10,
            times,
        ),
        Target(
            6,
            tag + "all_reduce 16 MB, N=8: gloo time / xlasim time",
            "all_reduce",
            16 * MIB,
            8,
            mode,
            "gloo_over_xlasim",
            ">=",
            2,
            times,
        ),
        Target(
            6,
            tag + "all_reduce 16 MB, N=8: xlasim time / memcpy bound",
            "all_reduce",
            16 * MIB,
            8,
            mode,
            "xlasim_over_bound",
            "<",
            3,
            times,
        ),
        Target(
            6,
            tag + "dispatch, warm world of 8: world.run(noop)",
            "dispatch",
            None,
            8,
            mode,
            "xlasim_s",
            "<",
            5e-3,
            millis,
        ),
        Target(
            6,
            tag + "dispatch, pytest: marked test - plain test",
            "pytest_dispatch",
            None,
            8,
            mode,
            "xlasim_s",
            "<",
            5e-3,
            millis,
        ),
    ]


ISSUE11_TARGETS = [
    Target(
        11,
        "[isolated] start-up, world of 8: emulate -> first world.run done",
        "startup",
        None,
        8,
        "isolated",
        "xlasim_s",
        "<=",
        3.0,
        seconds,
    ),
    Target(
        11,
        "all_reduce 16 MB, N=8: isolated time / threads time",
        "all_reduce",
        16 * MIB,
        8,
        "isolated",
        "isolated_over_threads",
        "<=",
        3,
        times,
    ),
    Target(
        11,
        "suite, pytest --xla-devices=8: isolated wall / threads wall",
        "suite",
        None,
        8,
        "isolated",
        "isolated_over_threads",
        "<=",
        1.5,
        times,
        optional=True,
    ),
    Target(
        11,
        "[isolated] world of 64 cores after one all_reduce: summed Pss of the process tree",
        "rss",
        None,
        64,
        "isolated",
        "pss_bytes",
        "<",
        24 * GIB,
        gibibytes,
    ),
]

ISSUE24_TARGETS = [
    Target(
        24,
        f"[{mode}] MLP training (compile-bound), 8 ranks{shared}: time / 1 rank's time",
        op,
        None,
        8,
        mode,
        "over_one_rank",
        "<=",
        1.5,
        times,
    )
    for op, mode, shared in (
        ("compile_mlp", "isolated", ""),
        ("compile_mlp", "threads", ""),
        ("compile_mlp_shared", "threads", ", compilations shared"),
    )
]


def issue26_targets(mode: str) -> list[Target]:
    """Issue 26: what tracing costs, on against off in one process (benchmarks/tracing.py)."""
    tag = f"[{mode}] "
    return [
        Target(
            26,
            tag + "all_reduce 4 KB, N=8: tracing on / off",
            "trace_all_reduce",
            4 * KIB,
            8,
            mode,
            "on_over_off",
            "<=",
            1.2,
            times,
        ),
        Target(
            26,
            tag + "all_reduce 4 KB, N=8: tracing off (after it was on) / never on",
            "trace_all_reduce",
            4 * KIB,
            8,
            mode,
            "off_over_never_traced",
            "<=",
            1.05,
            times,
        ),
    ]


#: Issue 23: what the HBM ledger (xlasim/tpu/memory.py) costs a small collective, on and off
#: alternated in one warm world (benchmarks/probes.py accounting).
ISSUE23_TARGETS = [
    Target(
        23,
        f"[{mode}] all_reduce 4 KB, N=8: HBM accounting on / off",
        "all_reduce_accounting",
        4 * KIB,
        8,
        mode,
        "accounting_over_off",
        "<=",
        1.1,
        times,
    )
    for mode in MODES
]

ISSUE26_DEMO_TARGET = Target(
    26,
    "[isolated] demo training step, 8 cores: tracing on / off",
    "trace_demo",
    None,
    8,
    "isolated",
    "on_over_off",
    "<=",
    1.05,
    times,
)

ISSUE27_TARGETS = [
    Target(
        27,
        "pytest tests/properties: wall with --xla-races / wall without",
        "races_detection",
        None,
        8,
        "isolated",
        "on_over_off",
        "<=",
        1.3,
        times,
        optional=True,
    ),
    Target(
        27,
        "one exploration schedule of an 8-rank test: call time / plain call time",
        "races_schedule",
        None,
        8,
        "isolated",
        "scheduled_over_plain",
        "<=",
        1.5,
        times,
        optional=True,
    ),
    Target(
        27,
        "one exploration schedule / the plain call pinned to one CPU (ranks taking turns "
        "cannot overlap: the floor of a schedule)",
        "races_schedule",
        None,
        8,
        "isolated",
        "scheduled_over_one_cpu",
        "<=",
        1.1,
        times,
        optional=True,
    ),
]

ISSUE33_TARGET = Target(
    33,
    "suite subset: (--cov / without) isolated over (--cov / without) threads",
    "coverage_cost",
    None,
    8,
    "isolated",
    "isolated_cost_over_threads",
    "<=",
    1.0,
    times,
    optional=True,
)

TARGETS = (
    *(target for mode in MODES for target in issue6_targets(mode)),
    Target(
        6,
        "[threads] world of 64 cores after one all_reduce: peak RSS (VmHWM)",
        "rss",
        None,
        64,
        "threads",
        "hwm_bytes",
        "<",
        4 * GIB,
        gibibytes,
    ),
    *ISSUE11_TARGETS,
    *ISSUE24_TARGETS,
    Target(
        23,
        "demo training step, 1 core: TPU arithmetic / exact f32",
        "arithmetic_step",
        None,
        1,
        "threads",
        "tpu_over_exact",
        "<=",
        1.3,
        times,
    ),
    *ISSUE23_TARGETS,
    *(target for mode in MODES for target in issue26_targets(mode)),
    ISSUE26_DEMO_TARGET,
    *ISSUE27_TARGETS,
    ISSUE33_TARGET,
)


def judge_all(records: list[Record]) -> list[Record]:
    """Every target's verdict, for the screen; each is also added to the `targets` list of the
    record it judges, so the --json records carry their own verdicts."""
    verdicts = []
    for target in TARGETS:
        record = target.find(records)
        status, value, shown = target.judge(record)
        if record is None and target.optional:
            continue
        verdict = {
            "issue": target.issue,
            "target": target.label,
            "value": value,
            "bound": target.bound(),
            "status": status,
            "shown": shown or ("-" if value is None else target.show(value)),
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
    """One row per (op, size, N, mode): both times, the bound and the ratios; the isolated row
    also carries its ratio to the threads row below it."""
    rows = [
        f"{'op':<15}{'size':>6}{'N':>4}  {'mode':<9}{'xlasim':>11}{'gloo':>12}{'memcpy bound':>14}"
        f"{'gloo/xlasim':>13}{'xlasim/bound':>14}{'isolated/threads':>18}"
    ]
    for r in records:
        if r["bytes"] is None:
            continue
        rows.append(
            f"{r['op']:<15}{size_label(r['bytes']):>6}{r['devices']:>4}  {r['mode']:<9}"
            f"{cell(r['xlasim_s'], millis):>11}{cell(r['gloo_s'], millis):>12}"
            f"{cell(r['memcpy_bound_s'], millis):>14}{cell(r.get('gloo_over_xlasim'), times):>13}"
            f"{cell(r.get('xlasim_over_bound'), times):>14}"
            f"{cell(r.get('isolated_over_threads'), times):>18}"
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


def versus(r: Record) -> str:
    """`; isolated/threads 12.3x` on an isolated record that has its threads peer."""
    ratio = r.get("isolated_over_threads")
    return "" if ratio is None else f"; isolated/threads {times(ratio)}"


def startup_line(r: Record) -> str:
    return (
        f"start-up, world of 8 (emulate -> first world.run done, fresh process): "
        f"{seconds(r['xlasim_s'])}{versus(r)}"
        f"  [emulate (torch, torch_xla imports) {r['emulate_s']:.2f} s, then ranks "
        f"{r['ranks_s']:.2f} s; before: import xlasim {r['import_s']:.2f} s; after: first 4 KB "
        f"all_reduce {r['first_all_reduce_s'] * 1e3:.0f} ms]"
    )


def dispatch_line(r: Record) -> str:
    return (
        f"dispatch, warm world of 8, world.run(noop): median {millis(r['xlasim_s'])}, "
        f"p90 {millis(r['p90_s'])}{versus(r)}"
    )


def pytest_dispatch_line(r: Record) -> str:
    return (
        f"dispatch per pytest test ({r['tests']} marked vs plain): {millis(r['xlasim_s'])}"
        f"{versus(r)}  [tests took {r['marked_span_s']:.2f} s vs {r['plain_span_s']:.2f} s;"
        f" whole runs {r['marked_run_s']:.1f} s vs {r['plain_run_s']:.1f} s]"
    )


def rss_line(r: Record) -> str:
    if r.get("error"):
        return f"memory, world of {r['devices']}: not started: {r['error']}"
    return (
        f"memory, world of {r['devices']} after one all_reduce: Pss {gibibytes(r['pss_bytes'])} summed over "
        f"{r['processes']} process(es) (private {gibibytes(r['private_bytes'])}){versus(r)}; "
        f"launching process VmRSS {gibibytes(r['rss_bytes'])}, VmHWM {gibibytes(r['hwm_bytes'])}"
    )


def suite_line(r: Record) -> str:
    failed = "".join(f"\n      {line}" for line in r["failures"])
    return f"suite, {r['command']}: {r['xlasim_s']:.1f} s wall{versus(r)} ({r['summary']}){failed}"


def compile_line(r: Record) -> str:
    ranks = r["rank_compilations"]
    per_rank = "" if ranks is None else f", per rank {'/'.join(map(str, ranks))}"
    one = r.get("over_one_rank")
    versus_one = "" if one is None else f"; {times(one)} the 1-rank run"
    shared = ", compilations shared" if r["op"] == "compile_mlp_shared" else ""
    return (
        f"MLP training (12 blocks, AdamW, 4 steps), {r['devices']} rank(s){shared}: "
        f"{seconds(r['xlasim_s'])}{versus_one}  [{r['compilations']} compilations{per_rank}, "
        f"{seconds(r['compile_s'])} compiling summed over ranks]"
    )


def trace_all_reduce_line(r: Record) -> str:
    return (
        f"tracing, 4 KB all_reduce, N=8: on {millis(r['xlasim_s'])}, off {millis(r['off_s'])}, "
        f"never on {millis(r['never_traced_s'])} per call (median of {r['blocks']} blocks each)"
    )


def trace_demo_line(r: Record) -> str:
    return (
        f"tracing, demo training ({r['topology']}): on {millis(r['xlasim_s'])}, off "
        f"{millis(r['off_s'])} per step; per launch (ranks' streams, trace files written) on "
        f"{seconds(r['launch_on_s'])}, off {seconds(r['launch_off_s'])} (fits of "
        f"{r['steps'][0]} and {r['steps'][1]} steps, median of {r['rounds']} each, load "
        f"{r['load'][0]:.1f} to {r['load'][1]:.1f}); CPU per step on / off: ranks' workers "
        f"{millis(r['cpu_workers_s'][0])} / {millis(r['cpu_workers_s'][1])}, launching process "
        f"{millis(r['cpu_launching_s'][0])} / {millis(r['cpu_launching_s'][1])}; a step records "
        f"{r['events_per_step']:.0f} events, writing the trace files costs "
        f"{r['write_s_per_event'] * 1e6:.1f} us of CPU per event"
    )


OTHER_LINES: dict[str, Callable[[Record], str]] = {
    "startup": startup_line,
    "dispatch": dispatch_line,
    "pytest_dispatch": pytest_dispatch_line,
    "rss": rss_line,
    "suite": suite_line,
    "compile_mlp": compile_line,
    "compile_mlp_shared": compile_line,
    "trace_all_reduce": trace_all_reduce_line,
    "trace_demo": trace_demo_line,
    "races_detection": races.detection_line,
    "races_schedule": races.schedule_line,
    "coverage_cost": coverage_cost.cost_line,
    "coverage_dispatch": coverage_cost.dispatch_line,
}


def other_line(r: Record) -> str | None:
    """How a non-collective record reads on screen, tagged with its mode."""
    show = OTHER_LINES.get(r["op"])
    return None if show is None else f"[{r['mode']:<8}] {show(r)}"


def run_line(r: Record) -> str:
    load = ", ".join(f"{x:.1f}" for x in r["load_average"])
    mode = "quick" if r["quick"] else "full"
    return f"xlasim {r['commit']}, {mode} run, {r['cpus']} CPUs, load average at start {load}"


def render(records: list[Record], verdicts: list[Record], notes: list[str]) -> str:
    """The whole screen report: collectives, the other measures, the targets, any failures."""
    lines = [run_line(records[0]), ""] if records and records[0]["op"] == "run" else []
    if any(r["bytes"] is not None for r in records):
        lines.append(
            "Collectives, float32, median time per call (all ranks in -> all ranks hold the result)"
        )
        lines += collective_table(records)
        lines += [memcpy_line(records), ""]
    lines.append("Other measures")
    lines += [f"  {line}" for r in records if (line := other_line(r))]
    lines += ["", "Targets (issues 6, 11, 24 and 26)"]
    lines += [
        f"  {v['status']:<5} {v['target']}: {v['shown']}  (target {v['bound']})" for v in verdicts
    ]
    if notes:
        lines += ["", "Not measured / failed"] + [f"  {note}" for note in notes]
    return "\n".join(lines)
