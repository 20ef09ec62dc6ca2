"""An accelerate-style test gated on a TPU by accelerate's own `require_tpu`."""

import unittest

import torch_xla.runtime as xr
from accelerate.test_utils import require_tpu


class GateTester(unittest.TestCase):
    @require_tpu
    def test_sees_the_tpu(self):
        assert xr.device_type() == "TPU"

    def test_not_a_tpu_test(self):
        raise AssertionError("not decorated with require_tpu: the runner leaves it out")
