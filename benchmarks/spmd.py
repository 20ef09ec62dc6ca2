"""SPMD on emulated cores (issue 17): one FSDPv2 training step on 8 emulated cores against the
same model unsharded on one device, and the start-up of an SPMD world.

    python benchmarks/spmd.py step --sharded    # worker: FSDPv2 (strategy.spmd) on 8 emulated cores
    python benchmarks/spmd.py step --single     # worker: the same step, unsharded, on 1 CPU device
    python benchmarks/spmd.py startup           # worker: fresh process -> first sharded result

Each worker is a process of its own (SPMD mode and the device count are fixed per process) and
reports one record on stdout; `records` runs them back to back for benchmarks/run.py, which
prints `lines(records)`. The step is forward, backward and SGD step of an MLP
(512 -> 2048 -> 512, batch 256) followed by `torch_xla.sync(wait=True)`, so nothing is pending
when the clock stops; the figure is the median of the timed steps after warm-up (compilation).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

BEGAN = time.perf_counter()  # before torch, torch_xla and xlasim are imported

from common import emit, parse_records  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEVICES = 8
WIDTHS, BATCH = (512, 2048, 512), 256
WARMUP_STEPS, TIMED_STEPS = 3, 10
TIMEOUT_S = {"step": 420.0, "startup": 300.0}  # the 2-core machine under load


def _model() -> Any:
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(WIDTHS[0], WIDTHS[1]), nn.Tanh(), nn.Linear(WIDTHS[1], WIDTHS[2])
    )


def _time_steps(model: Any, x: Any, y: Any) -> list[float]:
    """Seconds of each timed step (forward, backward, SGD step, sync and wait)."""
    import torch
    import torch_xla

    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    times = []
    for step in range(WARMUP_STEPS + TIMED_STEPS):
        start = time.perf_counter()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch_xla.sync(wait=True)
        if step >= WARMUP_STEPS:
            times.append(time.perf_counter() - start)
    if not torch.isfinite(loss.detach().cpu()):
        raise RuntimeError(f"the step's loss is {loss.item()}")
    return times


def step(sharded: bool) -> dict[str, Any]:
    """One training step's time: FSDPv2 over 8 emulated cores, or unsharded on one device."""
    if sharded:
        import xlasim

        xlasim.emulate(devices=DEVICES)
    else:
        os.environ.update(PJRT_DEVICE="CPU", CPU_NUM_DEVICES="1")
    import torch
    import torch_xla

    torch.manual_seed(1)
    x, y = torch.randn(BATCH, WIDTHS[0]), torch.randn(BATCH, WIDTHS[2])
    model = _model()
    if not sharded:
        device = torch_xla.device()
        return _record(sharded, _time_steps(model.to(device), x.to(device), y.to(device)))
    import torch_xla.distributed.spmd as xs

    sys.path.insert(0, str(ROOT))
    from strategy.spmd import SPMDStrategy, batch_spec

    strategy = SPMDStrategy()
    strategy.setup_environment()  # SPMD on before any tensor is on a device
    strategy.model = model
    strategy.model_to_device()  # FSDPv2: parameters sharded along fsdp
    x, y = x.to(strategy.root_device), y.to(strategy.root_device)
    for tensor in (x, y):
        xs.mark_sharding(tensor, strategy.mesh, batch_spec(tensor))
    return _record(sharded, _time_steps(model, x, y))


def _record(sharded: bool, times: list[float]) -> dict[str, Any]:
    return {
        "op": "spmd_step",
        "devices": DEVICES if sharded else 1,
        "mode": "fsdpv2" if sharded else "single",
        "xlasim_s": statistics.median(times),
        "steps_s": times,
    }


def startup() -> dict[str, Any]:
    """A fresh process to the first result of a sharded computation on 8 emulated cores."""
    import xlasim

    xlasim.emulate(devices=DEVICES)
    emulated = time.perf_counter()
    import numpy as np
    import torch
    import torch_xla
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr

    xr.use_spmd()
    mesh = xs.Mesh(np.arange(xr.global_runtime_device_count()), (DEVICES,), ("data",))
    spmd_on = time.perf_counter()
    t = torch.ones(DEVICES, 4).to(torch_xla.device())
    xs.mark_sharding(t, mesh, ("data", None))
    total = (t * 2).sum().item()
    done = time.perf_counter()
    if total != DEVICES * 8:
        raise RuntimeError(f"the sharded sum is {total}, expected {DEVICES * 8}")
    return {
        "op": "spmd_startup",
        "devices": DEVICES,
        "xlasim_s": done - BEGAN,
        "emulate_s": emulated - BEGAN,
        "spmd_s": spmd_on - emulated,
        "first_sharded_op_s": done - spmd_on,
    }


# ------------------------------------------------------------------------------ orchestration


def records(notes: list[str], progress: Any) -> list[dict[str, Any]]:
    """The three workers back to back (FSDPv2 step, single-device step, start-up), plus the
    step's overhead: FSDPv2 on 8 emulated cores over one device, from this same run."""
    from processes import run_script

    found = []
    for what, arguments in (
        ("FSDPv2 step, 8 emulated cores", ["step", "--sharded"]),
        ("unsharded step, 1 device", ["step", "--single"]),
        ("SPMD start-up, 8 emulated cores", ["startup"]),
    ):
        progress(what)
        finished = run_script("spmd.py", arguments, TIMEOUT_S[arguments[0]])
        if not finished.ok:
            notes.append(f"{what}: {finished.failure()}")
        found += parse_records(finished.stdout)
    steps = {r["mode"]: r for r in found if r["op"] == "spmd_step"}
    if {"fsdpv2", "single"} <= steps.keys():
        steps["fsdpv2"]["over_single"] = steps["fsdpv2"]["xlasim_s"] / steps["single"]["xlasim_s"]
    return found


def lines(records: list[dict[str, Any]]) -> list[str]:
    """How the SPMD records read on screen."""
    shown = []
    for r in records:
        if r["op"] == "spmd_step" and r["mode"] == "fsdpv2":
            ratio = r.get("over_single")
            versus = "" if ratio is None else f"; FSDPv2 / one device {ratio:.1f}x"
            shown.append(
                f"SPMD training step, FSDPv2 on {r['devices']} emulated cores: median "
                f"{r['xlasim_s'] * 1e3:.1f} ms{versus}"
            )
        elif r["op"] == "spmd_step":
            shown.append(
                f"SPMD training step, unsharded on 1 device: median {r['xlasim_s'] * 1e3:.1f} ms"
            )
        elif r["op"] == "spmd_startup":
            shown.append(
                f"SPMD start-up, {r['devices']} emulated cores (fresh process -> first sharded "
                f"result): {r['xlasim_s']:.2f} s  [emulate {r['emulate_s']:.2f} s, torch_xla + "
                f"use_spmd {r['spmd_s']:.2f} s, first sharded op {r['first_sharded_op_s']:.2f} s]"
            )
    return shown


def main(argv: list[str]) -> None:
    if argv[:1] == ["step"] and argv[1:] in (["--sharded"], ["--single"]):
        emit(step(argv[1] == "--sharded"))
    elif argv == ["startup"]:
        emit(startup())
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
