"""How many emulated cores a machine holds: `xlasim.max_devices()`.

The bound must come from the memory the kernel can give programs (`MemAvailable`: free memory
plus reclaimable page cache), not from free memory alone (`SC_AVPHYS_PAGES`): on a machine
with a warm page cache almost nothing is "free", and the old bound refused 4 cores on a 24 GiB
machine with 16 GiB available.
"""

import os

import pytest

import xlasim
from xlasim import activation

#: Memory that can move between two readings on a busy machine, in cores' worth.
SLACK = 2


def mem_available() -> int:
    """`MemAvailable` in bytes, read here independently of xlasim."""
    try:
        with open("/proc/meminfo") as meminfo:
            fields = dict(line.split(":", 1) for line in meminfo)
    except OSError:
        pytest.skip("no /proc/meminfo on this machine")
    if "MemAvailable" not in fields:
        pytest.skip("this kernel does not report MemAvailable")
    value, unit = fields["MemAvailable"].split()
    assert unit == "kB"
    return int(value) * 1024


def expected_range(per_core: int, measure) -> tuple[int, int, int]:
    """`measure()`, and the core counts MemAvailable allowed just before and after it."""
    before = mem_available()
    got = measure()
    after = mem_available()
    low = min(before, after) // per_core - SLACK
    high = max(before, after) // per_core + SLACK
    return got, max(1, low), min(activation.HARD_MAX_DEVICES, high)


@pytest.mark.parametrize(
    ("threaded", "per_core"),
    [(False, activation.BYTES_PER_PROCESS_CORE), (True, activation.BYTES_PER_THREAD_CORE)],
    ids=["process-per-core", "threads"],
)
def test_max_devices_is_mem_available_over_the_per_core_cost(monkeypatch, threaded, per_core):
    # A warm page cache: the kernel reports next to nothing as free (SC_AVPHYS_PAGES is free
    # pages only), yet it can reclaim the cache for programs at once.
    real_sysconf = os.sysconf
    monkeypatch.setattr(
        os, "sysconf", lambda name: 1 if name == "SC_AVPHYS_PAGES" else real_sysconf(name)
    )
    if mem_available() // per_core < 4 * SLACK:
        pytest.skip("too little available memory on this machine to tell the bounds apart")
    got, low, high = expected_range(per_core, lambda: xlasim.max_devices(threaded=threaded))
    assert low <= got <= high, (
        f"max_devices(threaded={threaded}) = {got}, but MemAvailable allows {low}..{high} cores "
        f"at {per_core >> 20} MiB each"
    )


def test_the_default_is_a_process_per_core() -> None:
    """`emulate` gives each core a process by default, so the bound without arguments is that
    mode's (the larger per-core cost)."""
    got, low, high = expected_range(activation.BYTES_PER_PROCESS_CORE, xlasim.max_devices)
    assert low <= got <= high
