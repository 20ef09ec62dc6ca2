"""The short metrics report printed at teardown in debug mode.

The three numbers that explain most slow XLA runs: how many graphs were compiled (recompiling
every step means shapes or Python values change), how many were executed, and which ops fell
back to the CPU (`aten::*` counters: each one is a device-to-host round trip). torch_xla keeps
these metrics per process: in emulation every rank is a thread of one process, so the figures
cover all ranks together.
"""

from __future__ import annotations

import torch_xla.debug.metrics as met


def _count(metric: str) -> tuple[int, float]:
    """(number of samples, total seconds) of a timing metric; (0, 0) if it never happened."""
    data = met.metric_data(metric)
    if data is None:
        return 0, 0.0
    count, total_ns, _ = data
    return int(count), total_ns / 1e9


def cpu_fallbacks() -> dict[str, int]:
    """Ops that ran on the CPU instead of the XLA device, with how many times."""
    return {
        name.removeprefix("aten::"): int(met.counter_value(name))
        for name in met.counter_names()
        if name.startswith("aten::")
    }


def metrics_report() -> str:
    """A few lines: compilations, executions, CPU fallbacks by op (most frequent first)."""
    compiles, compile_s = _count("CompileTime")
    executions, execute_s = _count("ExecuteTime")
    lines = [
        "XLA metrics (this process)",
        f"  compilations: {compiles} ({compile_s:.2f} s)",
        f"  executions:   {executions} ({execute_s:.2f} s)",
    ]
    fallbacks = sorted(cpu_fallbacks().items(), key=lambda item: (-item[1], item[0]))
    if fallbacks:
        lines.append("  CPU fallbacks: " + ", ".join(f"{op} x{n}" for op, n in fallbacks))
    else:
        lines.append("  CPU fallbacks: none")
    return "\n".join(lines)
