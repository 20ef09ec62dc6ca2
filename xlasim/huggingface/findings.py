"""Why a Hugging Face TPU test or script does not pass on the emulated slice, when it is known.

Each entry maps a row id to its class, a one-line reason, a signature that must appear in the
output for the entry to apply (another failure of the same job stays unexplained), and the
section of docs/huggingface.md that shows it, with its reproduction on native torch_xla without
xlasim (fixtures/huggingface/). Keep it small: every entry must be checkable from there.
"""

from __future__ import annotations

import re

from ..runners.findings import Finding, KnownFailures

#: accelerate's or transformers' own behaviour on XLA, reproduced on native torch_xla (one CPU
#: device) without xlasim: a TPU shows it too.
THEIRS = "theirs"
#: The job needs a model or data set from the Hugging Face hub (nothing downloads here).
NEEDS_HUB = "needs hub"

_SCRIPTS = "src/accelerate/test_utils/scripts"
_XLA_SPAWN_NPROCS = Finding(
    THEIRS,
    "the launcher passes nprocs=--num_cores to xmp.spawn, which torch_xla 2.x accepts only as 1 "
    "or None: ValueError: Unsupported nprocs before any rank starts",
    r"ValueError: Unsupported nprocs \(\d+\)",
    "xla_spawnpy-passes-num_cores-to-xmpspawn",
)

FINDINGS: dict[str, Finding] = {
    f"{_SCRIPTS}/test_script.py [accelerate launch --tpu]": Finding(
        THEIRS,
        "accelerate's gather_object raises NotImplementedError on XLA, and test_script.py's "
        "split_between_processes checks call it: the script stops there",
        r"NotImplementedError: gather objects in TPU is not supported",
        "gather_object-is-not-implemented-on-xla",
    ),
    f"{_SCRIPTS}/test_sync.py [accelerate launch --tpu]": Finding(
        THEIRS,
        "with gradient accumulation the prepared scheduler misses the step at the data loader's "
        "end: accelerate on XLA never sees the end of the data loader",
        r"Learning rates found in each optimizer did not align",
        "accelerate-on-xla-never-sees-the-end-of-the-data-loader",
    ),
    "tests/test_tpu.py::MultiTPUTester::test_tpu": Finding(
        THEIRS,
        "tests/xla_spawn.py imports test_utils/scripts/test_script.py and spawns its _mp_fn, "
        "which test_script.py does not define: AttributeError before any rank starts",
        r"has no attribute '_mp_fn'",
        "teststest_tpupy-spawns-a-function-test_scriptpy-does-not-have",
    ),
    "tests/trainer/test_trainer_tpu.py [xla_spawn]": _XLA_SPAWN_NPROCS,
    "tests/trainer/test_trainer_tpu.py [accelerate launch --tpu]": Finding(
        THEIRS,
        "evaluate() returns the samples repeated to even out the ranks' last batches: "
        "gather_for_metrics cannot drop them because accelerate on XLA never sees the end of "
        "the data loader (remainder -1), so eval_success is False",
        r"'eval_success': False",
        "accelerate-on-xla-never-sees-the-end-of-the-data-loader",
    ),
}

#: What huggingface_hub, transformers and datasets say when the hub is needed while offline.
_HUB = re.compile(
    r"OfflineModeIsEnabled|LocalEntryNotFoundError|offline mode is enabled|"
    r"We couldn't connect to 'https://huggingface\.co'|outgoing traffic has been disabled"
)


def needs_hub(text: str) -> tuple[str, str] | None:
    """NEEDS_HUB when the output says the hub was needed while offline."""
    hub = _HUB.search(text)
    if hub:
        return NEEDS_HUB, f"needs a model or data set from the hub (offline: {hub.group(0)})"
    return None


#: How Hugging Face's runner explains a failure: its findings, documented in
#: docs/huggingface.md, the hub being offline, or an optional package missing.
KNOWN_FAILURES = KnownFailures(
    FINDINGS,
    doc="docs/huggingface.md",
    missing=re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'"),
    requirements="not an xlasim dependency",
    stack=frozenset({"torch", "torch_xla", "xlasim"}),
    others=(needs_hub,),
)
