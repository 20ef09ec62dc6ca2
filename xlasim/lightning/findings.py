"""Why a Lightning TPU test does not pass on the emulated slice, when the reason is known.

Each entry maps a test id to its class, a one-line reason, a signature that must appear in the
test's output for the entry to apply, and the section of docs/lightning.md that shows it with a
minimal reproduction. Keep it small: every entry must be checkable from that section.
"""

from __future__ import annotations

import re

from ..runners.findings import Finding, KnownFailures

#: A bug of Lightning's that a real TPU shows too: kept failing, written down.
LIGHTNING_BUG = "Lightning bug"
#: The test hard-codes another slice than the one it runs on (it passes on that slice).
OTHER_SLICE = "other slice"


_BROADCAST_PICKLE = Finding(
    LIGHTNING_BUG,
    "XLAFSDPStrategy.broadcast of a non-tensor (the test's tmp_path, a PosixPath) ends in "
    "torch.load(buffer), weights_only by default since torch 2.6: UnpicklingError on every rank",
    r"Weights only load failed",
    "broadcast-of-objects-fails-on-torch-26",
)

_FSDP = "tests_fabric/strategies/test_xla_fsdp_integration.py::test_xla_fsdp_train_save_load"

FINDINGS: dict[str, Finding] = {
    **{
        f"{_FSDP}[{params}]": _BROADCAST_PICKLE
        for params in (
            "False-sharded-False",
            "False-full-False",
            "False-full-True",
            "True-sharded-False",
            "True-full-False",
        )
    },
    "tests_pytorch/models/test_tpu.py::test_accelerator_set_when_using_tpu[4]": Finding(
        OTHER_SLICE,
        "devices=4 is a v4-8 host's count; Lightning accepts only 1 or all of a host's devices, "
        "and the test passes on --xla-topology=v4-8",
        r"`devices` can only be 'auto', 1, \d+ or",
        "test_accelerator_set_when_using_tpu4-needs-a-v4-8",
    ),
    "tests_pytorch/callbacks/test_device_stats_monitor.py::test_device_stats_monitor_tpu": Finding(
        LIGHTNING_BUG,
        "DeviceStatsMonitor reads xm.get_memory_info()['kb_free'], a key torch_xla 2.9 no longer "
        "returns (KeyError on every rank); xfailed here only because xlasim's "
        "RankFailedError[KeyError] is also a RuntimeError (a TPU raises the bare KeyError, which "
        "the xfail(raises=RuntimeError) does not match)",
        r"KeyError: 'kb_free'",
        "devicestatsmonitor-reads-memory-keys-torch_xla-29-does-not-return",
    ),
}

#: How Lightning's runner explains a failure: its findings, documented in docs/lightning.md, or
#: a package of Lightning's test requirements missing.
KNOWN_FAILURES = KnownFailures(
    FINDINGS,
    doc="docs/lightning.md",
    missing=re.compile(r"(?:ModuleNotFoundError: No module named '([\w.]+)'|Neither `(\w+)` nor)"),
    requirements="Lightning's test requirements",
)
