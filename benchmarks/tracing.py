"""Worker: what tracing (issue 26, docs/tracing.md) costs, on against off in one process.

    python benchmarks/tracing.py all_reduce --mode isolated|threads   # 4 KB all_reduce, N=8
    python benchmarks/tracing.py demo                                  # the demo's training

`all_reduce`: the collective benchmark's rank loop (`emulated.rank_loop`), first before tracing
was ever on in this process (the wrappers not even installed: "never traced"), then launches
alternating off (wrappers installed, recording off) and on, so the machine's drift hits both
alike, which of the two goes first flipping from round to round (as `probes.py accounting`
does: there the first of a pair was up to 6% slower either way). The figure is the median
per-call time over every block of each kind.

`demo`: the strategy demo's training (`strategy.trainer.Trainer`, the demo's model and data,
8 emulated cores in worker processes), one warm-up fit, then rounds of fits of 8 and 32 steps,
traced and not, which goes first alternating between rounds (a fit's time drifts with the
machine's load; the fit before can leave work to the next). A step's cost is the difference of
the median fits over the 24 extra steps; what remains of the 8-step fit is the launch's own
cost (starting the ranks' streams, writing the trace files at its end), reported apart. The
launching process writes the trace files from every event after its ranks finished, so each
event recorded costs a step that too: the record says how many events a step adds and what
writing the files costs per event (CPU time, the least of several writes of a 32-step fit's
directory), and the load average as the fits began and ended.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import MODES, emit, emulate, per_call_seconds, plan
from emulated import rank_loop

ROOT = Path(__file__).resolve().parent.parent
DEVICES, NBYTES = 8, 4096
ROUNDS, REPEATS = 5, 3
SHORT_FIT, LONG_FIT, DEMO_ROUNDS = 8, 32, 6
WRITES = 5
TRACE_ENV = "XLASIM_TRACE"


def _traced(directory: str | None) -> None:
    if directory is None:
        os.environ.pop(TRACE_ENV, None)
    else:
        os.environ[TRACE_ENV] = directory


def all_reduce(mode: str) -> dict:
    import xlasim

    emulate(DEVICES, mode)
    world = xlasim.world()
    the_plan = plan(NBYTES, DEVICES, REPEATS)

    def blocks() -> list[float]:
        spans = world.run(rank_loop, args=("all_reduce", NBYTES, the_plan))
        return per_call_seconds(spans, the_plan.iterations)

    scratch = tempfile.mkdtemp(prefix="xlasim-bench-trace-")
    fresh = [b for _ in range(ROUNDS) for b in blocks()]
    off, on = [], []
    for round_ in range(ROUNDS):  # on first, then off first: the first of a pair ran slower
        for traced in (True, False) if round_ % 2 == 0 else (False, True):
            _traced(f"{scratch}/{round_}" if traced else None)
            (on if traced else off).extend(blocks())
    _traced(None)
    return {
        "op": "trace_all_reduce",
        "bytes": NBYTES,
        "devices": DEVICES,
        "mode": mode,
        "topology": world.topology.describe(),
        "xlasim_s": statistics.median(on),
        "off_s": statistics.median(off),
        "never_traced_s": statistics.median(fresh),
        "on_over_off": statistics.median(on) / statistics.median(off),
        "off_over_never_traced": statistics.median(off) / statistics.median(fresh),
        "blocks": len(on),
    }


def demo() -> dict:
    sys.path.insert(0, str(ROOT))
    import xlasim

    topology = xlasim.emulate(devices=DEVICES)
    import torch
    from torch.utils.data import DataLoader

    from fixtures.data import regression_data
    from fixtures.models import WeightSharingModule
    from strategy.trainer import Trainer

    shape = (WeightSharingModule.in_features, WeightSharingModule.out_features)
    train = DataLoader(regression_data(2048, *shape, seed=0), 8, shuffle=True)
    scratch = tempfile.mkdtemp(prefix="xlasim-bench-demo-")

    def fit(name: str, steps: int) -> tuple[float, float, float]:
        """The fit's wall time, and the CPU time of this process and of the ranks' workers."""
        torch.manual_seed(0)
        model = WeightSharingModule()
        trainer = Trainer(
            devices=DEVICES, max_steps=steps, checkpoint_dir=Path(scratch) / name, seed=0
        )
        here, workers = _cpu_seconds()
        start = time.perf_counter()
        trainer.fit(model, train)
        wall = time.perf_counter() - start
        here_after, workers_after = _cpu_seconds()
        return wall, here_after - here, workers_after - workers

    fit("warm-up", SHORT_FIT)  # compile, start the workers
    load_before = os.getloadavg()[0]
    fits: dict[tuple[bool, int], list[tuple[float, float, float]]] = {}
    for round_ in range(DEMO_ROUNDS):
        for traced in (True, False) if round_ % 2 == 0 else (False, True):
            for steps in (SHORT_FIT, LONG_FIT):
                # A directory per fit: a launch's end rewrites the trace files from everything
                # its directory holds, and the long fit must not pay for the short one's events.
                _traced(f"{scratch}/trace-{round_}-{steps}" if traced else None)
                fits.setdefault((traced, steps), []).append(
                    fit(f"{round_}-{traced}-{steps}", steps)
                )
    _traced(None)
    load_after = os.getloadavg()[0]
    median = {key: statistics.median(wall for wall, _, _ in values) for key, values in fits.items()}
    events = {steps: _events(Path(scratch) / f"trace-0-{steps}") for steps in (SHORT_FIT, LONG_FIT)}

    def per_step(traced: bool) -> float:
        return (median[traced, LONG_FIT] - median[traced, SHORT_FIT]) / (LONG_FIT - SHORT_FIT)

    def per_launch(traced: bool) -> float:
        return median[traced, SHORT_FIT] - SHORT_FIT * per_step(traced)

    def cpu_per_step(traced: bool, which: int) -> float:
        long, short = (
            statistics.median(times[which] for times in fits[traced, steps])
            for steps in (LONG_FIT, SHORT_FIT)
        )
        return (long - short) / (LONG_FIT - SHORT_FIT)

    return {
        "op": "trace_demo",
        "bytes": None,
        "devices": DEVICES,
        "mode": MODES[0] if topology.processes == DEVICES else "threads",
        "topology": topology.describe(),
        "xlasim_s": per_step(True),
        "off_s": per_step(False),
        "on_over_off": per_step(True) / per_step(False),
        "launch_on_s": per_launch(True),
        "launch_off_s": per_launch(False),
        "cpu_launching_s": (cpu_per_step(True, 1), cpu_per_step(False, 1)),
        "cpu_workers_s": (cpu_per_step(True, 2), cpu_per_step(False, 2)),
        "events_per_step": (events[LONG_FIT] - events[SHORT_FIT]) / (LONG_FIT - SHORT_FIT),
        "write_s_per_event": _write_seconds(Path(scratch) / f"trace-0-{LONG_FIT}")
        / events[LONG_FIT],
        "load": (load_before, load_after),
        "steps": (SHORT_FIT, LONG_FIT),
        "rounds": DEMO_ROUNDS,
    }


def _cpu_seconds() -> tuple[float, float]:
    """CPU time so far of this process, and of the processes it started (the ranks' workers,
    their zygote), from Linux's per-thread run times: nanoseconds, where /proc's process
    times count ticks (10 ms, half a step); threads that ended are left out (the ranks' and
    the links' threads last as long as the world)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    mine = os.getpid()
    pending, descendants = list(children.get(mine, [])), []
    while pending:
        pid = pending.pop()
        descendants.append(pid)
        pending += children.get(pid, [])
    return _run_seconds(mine), sum(_run_seconds(pid) for pid in descendants)


def _run_seconds(pid: int) -> float:
    total = 0
    with contextlib.suppress(OSError):
        for task in os.scandir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"{task.path}/schedstat") as schedstat:
                total += int(schedstat.read().split()[0])
    return total / 1e9


def _events(directory: Path) -> int:
    """How many events every rank recorded into a trace directory."""
    from xlasim.events import model

    return sum(len(events) for events in model.read_ranks(directory).values())


def _write_seconds(directory: Path) -> float:
    """The CPU time writing a trace directory's files takes this process (the least of
    `WRITES`: CPU time leaves out waiting for the machine, not the caches others evict)."""
    from xlasim.trace_files import session

    times = []
    for _ in range(WRITES):
        start = time.process_time()
        session.write(directory)
        times.append(time.process_time() - start)
    return min(times)


def main() -> None:
    what = sys.argv[1]
    if what == "all_reduce":
        mode = sys.argv[sys.argv.index("--mode") + 1] if "--mode" in sys.argv else MODES[0]
        emit(all_reduce(mode))
    elif what == "demo":
        emit(demo())
    else:
        raise SystemExit(f"usage: {__doc__.splitlines()[2].strip()}")


if __name__ == "__main__":
    main()
