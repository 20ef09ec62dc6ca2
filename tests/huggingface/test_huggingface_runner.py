"""`xlasim huggingface`: an accelerate-style checkout's TPU scripts launched by
`accelerate launch --tpu` and its TPU-gated tests run under the plugin, with their gate decided
by accelerate itself on the emulated slice, and every non-pass classified."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip(
    "accelerate", reason="accelerate is not installed (pip install 'xlasim[huggingface]')"
)

from fixtures.other_failures import OTHER_FAILURES
from xlasim.huggingface.discovery import discover
from xlasim.huggingface.findings import FINDINGS, KNOWN_FAILURES, THEIRS

FAKE = Path(__file__).parent / "fake_checkout"
SYNC = "src/accelerate/test_utils/scripts/test_sync.py [accelerate launch --tpu]"


def test_runner_table_on_an_accelerate_style_checkout(tmp_path, emulated):
    out = tmp_path / "rows.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLASIM_", "PJRT_"))}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "xlasim",
            "huggingface",
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
    rows = {row["id"]: row for row in json.loads(out.read_text())}
    scripts = "src/accelerate/test_utils/scripts"
    passing = f"{scripts}/test_collectives.py [accelerate launch --tpu]"
    broken = f"{scripts}/test_broken.py [accelerate launch --tpu]"
    gated = "tests/test_gate.py::GateTester::test_sees_the_tpu"
    assert set(rows) == {passing, broken, gated}, done.stderr[-3000:]
    assert rows[passing]["result"] == "passed", rows
    assert "all_gather" in rows[passing]["reason"]  # what the ranks did, counted
    assert rows[gated]["result"] == "passed", rows  # accelerate's require_tpu opened by itself
    assert rows[broken]["result"] == "failed"
    assert "ValueError: a new failure" in rows[broken]["reason"]
    assert done.returncode == 1  # an unexplained failure gates


def test_discovery_keeps_only_what_tpu_ci_runs():
    jobs = {job.id: job for job in discover(FAKE)}
    assert set(jobs) == {
        "src/accelerate/test_utils/scripts/test_collectives.py [accelerate launch --tpu]",
        "src/accelerate/test_utils/scripts/test_broken.py [accelerate launch --tpu]",
        "tests/test_gate.py",
    }
    assert jobs["tests/test_gate.py"].tests == (
        "tests/test_gate.py::GateTester::test_sees_the_tpu",
    )


def test_a_finding_needs_its_signature():
    assert FINDINGS[SYNC].kind == THEIRS
    text = "AssertionError: Learning rates found in each optimizer did not align\nopt: 0.1"
    assert KNOWN_FAILURES.failure(SYNC, text, "AssertionError")[0] == THEIRS
    other = KNOWN_FAILURES.failure(
        SYNC, "RuntimeError: something else", "RuntimeError: something else"
    )
    assert other == ("failed", "RuntimeError: something else")
    offline = "huggingface_hub.errors.OfflineModeIsEnabled: Cannot reach https://huggingface.co"
    assert KNOWN_FAILURES.failure("any", offline, "OfflineModeIsEnabled")[0] == "needs hub"


@pytest.mark.parametrize("id", sorted(FINDINGS))
def test_every_signature_matches_its_own_bug_and_no_other_failure(id):
    for text in OTHER_FAILURES:
        assert KNOWN_FAILURES.failure(id, text, text)[0] == "failed", (id, text)
