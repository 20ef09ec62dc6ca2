"""Test files written for an SPMD process (as torch_xla's test/spmd) run in a child session.

Such a file turns SPMD on itself (at import, or in setUpClass through a sibling base class) and
knows nothing of the plugin. It runs in a child pytest session that is an SPMD world over the
slice; its reports are replayed in the session, and the files after it never see SPMD.
"""

BASE = """
import unittest

import torch_xla.runtime as xr


class SpmdBase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        xr.use_spmd()
"""

UPSTREAM_STYLE = """
import os
import signal
import unittest

import numpy as np
import torch
import torch_xla
import torch_xla.runtime as xr

import spmd_base


class ShardingTest(spmd_base.SpmdBase):
    def test_world(self):
        self.assertTrue(xr.is_spmd())
        self.assertEqual(xr.global_runtime_device_count(), 8)
        self.assertEqual(xr.global_runtime_device_attributes()[7]["name"], "TPU:7")

    def test_fails(self):
        self.assertEqual(xr.global_runtime_device_count(), -1)

    def test_crashes(self):
        os.kill(os.getpid(), signal.SIGSEGV)

    @unittest.skip("not on this slice")
    def test_skipped(self):
        pass

    def test_deselected(self):
        raise AssertionError("deselected, never run")
"""

REPLICA = """
import os

import pytest
import torch_xla.runtime as xr


@pytest.mark.xla
def test_replica_after(xla_rank):
    assert not xr.is_spmd() and "XLA_USE_SPMD" not in os.environ


def test_plain_after():
    assert not xr.is_spmd() and "XLA_USE_SPMD" not in os.environ
"""


def test_spmd_file_runs_in_a_child_session(pytester, inner_environment) -> None:
    pytester.makepyfile(spmd_base=BASE, test_a_upstream=UPSTREAM_STYLE, test_b_replica=REPLICA)
    result = pytester.runpytest_subprocess(
        "--xla-devices=8",
        "--xla-processes=1",
        "-rA",
        "-p",
        "no:cacheprovider",
        "--deselect=test_a_upstream.py::ShardingTest::test_deselected",
        "--junitxml=junit.xml",
        timeout=600,
    )
    result.assert_outcomes(passed=3, failed=2, skipped=1, deselected=1)
    result.stdout.fnmatch_lines(
        [
            "[[]xlasim[]] the SPMD child session running test_a_upstream.py was killed by "
            "SIGSEGV; the end of its output:",
            "PASSED test_a_upstream.py::ShardingTest::test_world",
            "PASSED test_b_replica.py::test_replica_after",
            "PASSED test_b_replica.py::test_plain_after",
            "FAILED test_a_upstream.py::ShardingTest::test_crashes - *",
            "FAILED test_a_upstream.py::ShardingTest::test_fails - AssertionError: 8 != -1",
        ],
        consecutive=False,
    )
    junit = (pytester.path / "junit.xml").read_text()
    assert 'name="test_world"' in junit and 'name="test_crashes"' in junit
    assert 'message="not on this slice"' in junit  # a replayed skip reaches junit too


HANDS_OFF = """
from concurrent.futures import ProcessPoolExecutor

import torch_xla.runtime as xr


def _spmd_program():
    xr.use_spmd()


def test_in_a_pool():
    with ProcessPoolExecutor() as pool:
        pool.submit(_spmd_program).result()
"""


def test_only_a_call_of_use_spmd_makes_an_spmd_file(tmp_path) -> None:
    """A comment or a string that names xr.use_spmd() is not a call (tests/strategy's SPMD tests
    mention it while running SPMD in subprocesses of their own); a base class's call in a
    sibling module is, and a file written for the plugin never is. A function the file only
    hands to another process to run (torch_xla's test_persistent_cache.py submits its SPMD
    programs to a ProcessPoolExecutor) makes that process SPMD, not this one; the same
    function called by the file does."""
    from xlasim.pytest_plugin.spmd.files import turns_spmd_on

    (tmp_path / "spmd_base.py").write_text(BASE)
    files = {
        "test_mentions.py": '# xr.use_spmd() is for good\nCODE = "xr.use_spmd()"\n',
        "test_inherits.py": UPSTREAM_STYLE,
        "test_marked.py": "import pytest\nimport torch_xla.runtime as xr\n\n"
        "@pytest.mark.xla(spmd=True)\ndef test_x():\n    xr.use_spmd()\n",
        "test_hands_off.py": HANDS_OFF,
        "test_calls_its_own.py": HANDS_OFF + "\n\ndef test_here():\n    _spmd_program()\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    found = {name: turns_spmd_on(tmp_path / name) for name in files}
    assert found == {
        "test_mentions.py": False,
        "test_inherits.py": True,
        "test_marked.py": False,
        "test_hands_off.py": False,
        "test_calls_its_own.py": True,
    }
