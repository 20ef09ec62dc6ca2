"""What one machine sends another at a collective (`xlasim.pods.wire`): calls and payloads
arrive bit for bit, and every length a peer's header gives is checked against the message
before anything is allocated for it: a negative length, a buffer past the message's end, or a
shape that holds other than the bytes sent is an error naming the machine."""

from __future__ import annotations

import pytest
import torch

from xlasim.base.errors import XlasimError
from xlasim.emulation.rendezvous import Call
from xlasim.pods import wire

CALL = Call("all_reduce", (("reduce_type", "sum"),), "script.py:3")


def _entry(rank: int, **payload) -> dict:
    return {"rank": rank, "op": "all_reduce", "signature": "", "location": "x:1", **payload}


def test_calls_and_payloads_arrive_bit_for_bit():
    sent = {2: (CALL, [torch.randn(3, 5).to(torch.bfloat16), torch.arange(4)]), 3: (CALL, b"ab")}
    received = wire.decode(wire.encode(sent), machine=1)
    (call, tensors), (_, raw) = received[2], received[3]
    assert call.describe() == "all_reduce(reduce_type=sum) at script.py:3 (on machine 1)"
    assert all(torch.equal(got, want) for got, want in zip(tensors, sent[2][1], strict=True))
    assert tensors[0].dtype == torch.bfloat16 and raw == b"ab"


def test_a_negative_length_is_refused_naming_the_machine():
    # -3 bytes, then 3 more than the last buffer: without the check the offsets walk back into
    # the header and the message decodes, rank 1 getting part of the JSON as its bytes.
    message = wire.frame([_entry(0, bytes=-3), _entry(1, bytes=7)], [b"four"])
    with pytest.raises(XlasimError, match=r"machine 2 sent .*: a buffer of -3 bytes"):
        wire.decode(message, machine=2)


def test_a_buffer_past_the_end_and_a_header_past_the_end_are_refused():
    message = wire.frame([_entry(0, bytes=2**62)], [b"four"])
    with pytest.raises(XlasimError, match=r"machine 2 sent .*past the message's end"):
        wire.decode(message, machine=2)
    oversized = (2**62).to_bytes(8, "big") + b"[]"
    with pytest.raises(XlasimError, match=f"machine 2 sent .*a header of {2**62} bytes"):
        wire.decode(oversized, machine=2)


def test_a_shape_that_does_not_hold_the_bytes_sent_allocates_nothing():
    # 2**28 float32 elements in 0 bytes: taken at its word, the shape allocates 1 GiB.
    layout = {"dtype": "float32", "shape": [2**28], "bytes": 0}
    message = wire.frame([_entry(0, tensors=[layout])], [])
    with pytest.raises(
        XlasimError, match=r"machine 2 sent .*\[268435456\] in 0 bytes, not 1073741824"
    ):
        wire.decode(message, machine=2)
    negative = {"dtype": "float32", "shape": [-1], "bytes": 0}
    with pytest.raises(XlasimError, match=r"machine 2 sent .*shape \[-1\]"):
        wire.decode(wire.frame([_entry(0, tensors=[negative])], []), machine=2)
