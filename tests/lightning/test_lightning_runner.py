"""`xlasim lightning`: Lightning-style TPU tests run with their gate decided by Lightning's own
RunIf on the emulated slice, standalone tests alone, and every non-pass classified."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip(
    "lightning", reason="Lightning is not installed (pip install 'xlasim[lightning]')"
)

from fixtures.other_failures import OTHER_FAILURES
from xlasim.lightning.findings import FINDINGS, KNOWN_FAILURES, LIGHTNING_BUG

FAKE = Path(__file__).parent / "fake_checkout"
FSDP = (
    "tests_fabric/strategies/test_xla_fsdp_integration.py::"
    "test_xla_fsdp_train_save_load[False-sharded-False]"
)


def test_runner_table_on_a_lightning_style_checkout(tmp_path, not_native):
    out = tmp_path / "rows.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLASIM_", "PJRT_", "PL_"))}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "xlasim",
            "lightning",
            str(FAKE),
            "--devices",
            "2",
            "--json",
            str(out),
            "--timeout",
            "300",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    rows = {row["id"].split("::")[-1]: row for row in json.loads(out.read_text())}
    assert set(rows) == {"test_sees_tpu", "test_alone", "test_broken"}, done.stderr[-3000:]
    assert rows["test_sees_tpu"]["result"] == "passed", rows
    assert (rows["test_sees_tpu"]["mode"], rows["test_alone"]["mode"]) == ("file", "standalone")
    assert rows["test_alone"]["result"] == "passed", rows
    assert rows["test_broken"]["result"] == "failed"
    assert "ValueError: a new failure" in rows["test_broken"]["reason"]
    assert done.returncode == 1  # an unexplained failure gates
    assert (
        "| test_" not in done.stdout
        and "tests_pytorch/test_fake_tpu.py::test_broken" in done.stdout
    )


def test_a_finding_needs_its_signature():
    assert FINDINGS[FSDP].kind == LIGHTNING_BUG
    text = "_pickle.UnpicklingError: Weights only load failed. ..."
    assert KNOWN_FAILURES.failure(FSDP, text, "UnpicklingError")[0] == LIGHTNING_BUG
    other = KNOWN_FAILURES.failure(
        FSDP, "RuntimeError: something else", "RuntimeError: something else"
    )
    assert other == ("failed", "RuntimeError: something else")


@pytest.mark.parametrize("id", sorted(FINDINGS))
def test_every_signature_matches_its_own_bug_and_no_other_failure(id):
    for text in OTHER_FAILURES:
        assert KNOWN_FAILURES.failure(id, text, text)[0] == "failed", (id, text)


def test_the_device_stats_finding_matches_the_missing_memory_key():
    id = "tests_pytorch/callbacks/test_device_stats_monitor.py::test_device_stats_monitor_tpu"
    text = "xlasim.RankFailedError[KeyError]: rank 0/8 raised KeyError: 'kb_free'"
    assert KNOWN_FAILURES.failure(id, text, text)[0] == LIGHTNING_BUG
