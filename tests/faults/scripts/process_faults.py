"""Faults that end or interrupt a process, each run in a process of its own by the tests.

`python process_faults.py DEVICES PROCESSES HOSTS STEP...` emulates that topology and runs the
steps in order, printing one JSON line per step; the last step may end the process (an uncaught
Ctrl-C), which the test watches from outside.
"""

import json
import os
import signal
import sys
import time

import xlasim

TIMEOUT_S = 3.0


def all_reduce(rank):
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm

    return xm.all_reduce("sum", torch.ones(1, device=torch_xla.device())).item()


def exits(rank, how):
    if rank == 1:
        if how == "exit":
            os._exit(7)
        os.abort()
    return all_reduce(rank)


def interrupts(rank):
    """Rank 0 presses Ctrl-C (SIGINT to the whole process group, as a terminal sends it) while
    the others wait for rank 1, which arrives late."""
    if rank == 0:
        os.killpg(os.getpgrp(), signal.SIGINT)
    if rank == 1:
        time.sleep(30)
    return all_reduce(rank)


def report(step, started, **fields):
    fields.update(step=step, seconds=round(time.monotonic() - started, 2))
    print(json.dumps(fields), flush=True)


def main():
    # A shell starts a background job (`cmd &` in a script, a CI step's subshell) with SIGINT
    # ignored, and children inherit that: Ctrl-C would then do nothing here. The steps press
    # Ctrl-C as a terminal does for a foreground job, so Python's own handler is put back.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    devices, processes, hosts = (int(a) for a in sys.argv[1:4])
    xlasim.emulate(devices=devices, processes=processes, hosts=hosts)
    world = xlasim.world()
    world.collective_timeout = TIMEOUT_S
    for step in sys.argv[4:]:
        started = time.monotonic()
        try:
            if step in ("exit", "abort"):
                world.run(exits, (step,), timeout=30)
            elif step in ("sigint-caught", "sigint-uncaught"):
                report(step + "-sent", started, time=time.time())
                try:
                    world.run(interrupts, timeout=30)
                except KeyboardInterrupt:
                    if step == "sigint-uncaught":
                        raise
                    report(step, started, error="KeyboardInterrupt")
                    continue
            elif step == "rerun":
                report(step, started, results=world.run(all_reduce, timeout=30))
                continue
            elif step == "reemulate":
                xlasim.emulate(devices=2 * devices, processes=2 * processes, hosts=hosts)
            report(step, started, error=None)
        except Exception as error:
            report(step, started, error=f"{type(error).__name__}: {error}")


if __name__ == "__main__":
    main()
