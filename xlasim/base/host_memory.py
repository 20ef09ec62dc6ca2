"""What this machine can still give programs: the emulated cores all live in its memory, so both
the device budget (`xlasim.max_devices`) and the HBM ledger's host check (`tpu/memory.py`) ask."""

from __future__ import annotations


def available_memory() -> int | None:
    """What the kernel says can still be given to programs (free memory plus reclaimable page
    cache: `MemAvailable`), or None where that is not known."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
