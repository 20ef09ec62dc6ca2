"""Rank results crossing machines (`xlasim.pods.results`): what a test's parent compares
arrives bit for bit and typed as it was sent; what cannot cross without pickling is named, and
a malformed message is an error naming its machine (nothing is ever unpickled)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from xlasim.base.errors import XlasimError
from xlasim.pods import results


def test_results_arrive_bit_for_bit_with_their_types():
    sent = {
        2: (torch.randn(3, 4).to(torch.bfloat16), torch.arange(5, dtype=torch.int32)),
        3: {
            "loss": 0.25,
            7: [None, True, "text", b"\x00raw", np.arange(6, dtype=np.float32).reshape(2, 3)],
        },
    }
    received = results.decode(results.encode(sent), machine=1)
    first, second = received[2]
    assert isinstance(received[2], tuple)
    assert first.dtype == torch.bfloat16 and torch.equal(first, sent[2][0])
    assert torch.equal(second, sent[2][1])
    assert received[3]["loss"] == 0.25
    listed = received[3][7]
    assert listed[:4] == [None, True, "text", b"\x00raw"]
    assert isinstance(listed[4], np.ndarray) and np.array_equal(listed[4], sent[3][7][4])


def test_what_cannot_cross_is_named_where_it_stayed():
    received = results.decode(results.encode({3: object()}), machine=1)
    assert repr(received[3]).startswith("<rank 3's result, a object, stayed on machine 1")


def test_a_malformed_message_is_an_error_naming_its_machine():
    message = results.encode({0: torch.ones(4)})
    with pytest.raises(XlasimError, match="machine 1 sent malformed rank results"):
        results.decode(message[:-3], machine=1)
    with pytest.raises(XlasimError, match="machine 1 sent malformed rank results"):
        results.decode(message + b"extra", machine=1)
