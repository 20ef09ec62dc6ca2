"""A Lightning-style TPU test file for the runner's own test: Lightning's real RunIf gate."""

import os

import pytest
from lightning.fabric.accelerators import XLAAccelerator
from lightning.fabric.utilities.testing import _runif_reasons


def RunIf(**kwargs):
    reasons, marker_kwargs = _runif_reasons(**kwargs)
    return pytest.mark.skipif(
        condition=len(reasons) > 0, reason=f"Requires: [{' + '.join(reasons)}]", **marker_kwargs
    )


@RunIf(tpu=True)
def test_sees_tpu():
    assert XLAAccelerator.auto_device_count() == 2


@RunIf(tpu=True, standalone=True)
def test_alone():
    assert os.environ["PL_RUN_STANDALONE_TESTS"] == "1"


@RunIf(tpu=True)
def test_broken():
    raise ValueError("a new failure")


def test_not_a_tpu_test():
    raise AssertionError("PL_RUN_TPU_TESTS=1 filters this out")
