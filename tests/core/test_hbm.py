"""HBM as a TPU has it (issue 23): `xm.get_memory_info()` answers each rank's live device bytes,
its peak and the generation's HBM, and a rank whose live data would pass its HBM fails as a TPU
does, before anything is allocated, and the slice serves the next test."""

from __future__ import annotations

import gc
import re
import time

import pytest
import torch
import torch_xla
import torch_xla.core.xla_model as xm

import xlasim

#: A v5e chip's HBM (docs/fidelity.md, "HBM"): the plain `--xla-devices=N` slice is a v5e host.
V5E_HBM = 16 * 2**30
#: Linear(66000, 66000): 17.4 GB of weights, past the chip whatever runs first (with the
#: gradient and Adam's two moments, 70 GB): nothing of it may be allocated, at any world size.
FEATURES = 66_000


def memory_around_a_tensor() -> tuple[dict, dict, dict, int]:
    device = torch_xla.device()
    before = xm.get_memory_info()
    tensor = torch.ones(512, 1024, device=device)
    torch_xla.sync()
    grown = xm.get_memory_info()
    nbytes = tensor.numel() * tensor.element_size()
    del tensor
    fallen = xm.get_memory_info()
    return before, grown, fallen, nbytes


def test_memory_info_grows_by_a_tensor_and_falls_when_it_is_freed(xla_world):
    for rank, (before, grown, fallen, nbytes) in enumerate(xla_world.run(memory_around_a_tensor)):
        where = f"on rank {rank}"
        if xlasim.is_emulated():
            assert grown["bytes_used"] - before["bytes_used"] == nbytes, where
            assert fallen["bytes_used"] == before["bytes_used"], where
            assert grown["bytes_limit"] == V5E_HBM, where
        else:  # a TPU pads to its tiles and frees asynchronously
            assert grown["bytes_used"] - before["bytes_used"] >= nbytes, where
        assert grown["peak_bytes_used"] >= grown["bytes_used"], where


def memory_with_an_emptied_tensor() -> tuple[int, int]:
    """The state the ledger meets when another thread frees a tensor it is reading: a view's
    base (torch keeps its Python object alive from C++ once its name is gone) held from
    Python while torch frees it, which torch then empties ("Deallocating Tensor that still
    has live PyObject references"). Here the holder is this function, so the state is
    reached every time, not by chance."""
    device = torch_xla.device()
    before = xm.get_memory_info()["bytes_used"]
    base = torch.ones(512, 1024, device=device)
    view = base.view(-1)
    base_id = id(base)
    del base
    held = [young for young in gc.get_objects(0) if id(young) == base_id]
    assert held, "the base's Python object outlives its name"
    gc.collect()  # the collector's callback notes the base, still whole, for this rank's count
    del view
    return before, xm.get_memory_info()["bytes_used"]


def test_a_tensor_emptied_under_the_ledger_holds_nothing(xla_world):
    for rank, (before, after) in enumerate(xla_world.run(memory_with_an_emptied_tensor)):
        if xlasim.is_emulated():  # a TPU frees asynchronously
            assert after == before, f"on rank {rank}"


def memory_with_the_collector_off() -> tuple[int, int, int]:
    """A step marker with Python's collector turned off: the ledger collects the youngest
    generation at step markers (xlasim/tpu/memory.py), but not in a program that turned the
    collector off, and counts the tensor all the same."""
    device = torch_xla.device()
    before = xm.get_memory_info()["bytes_used"]
    gc.disable()
    try:
        collections = sum(generation["collections"] for generation in gc.get_stats())
        tensor = torch.ones(256, 1024, device=device) * 2
        torch_xla.sync()
        collected = sum(generation["collections"] for generation in gc.get_stats()) - collections
        grown = xm.get_memory_info()["bytes_used"] - before
    finally:
        gc.enable()
    return collected, grown, tensor.numel() * tensor.element_size()


def test_a_program_that_turned_the_collector_off_keeps_it_off(xla_world):
    # one rank: ranks that are threads share the collector's switch
    [(collected, grown, nbytes)] = xla_world.run_on(1, memory_with_the_collector_off)
    assert collected == 0
    if xlasim.is_emulated():
        assert grown == nbytes


def train_past_the_hbm() -> float:
    """One Adam step of a model bigger than a v5e chip, built on the device (nothing on the
    host); returns how long it took to be refused."""
    started = time.monotonic()
    device = torch_xla.device()
    model = torch.nn.Linear(FEATURES, FEATURES, device=device)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(2, FEATURES, device=device)).sum().backward()
    xm.optimizer_step(optimizer, barrier=True)
    return time.monotonic() - started


def small_step() -> int:
    value = (torch.ones(8, device=torch_xla.device()) * 3).sum().item()
    assert value == 24
    return xm.get_memory_info()["bytes_used"]


def test_a_model_past_the_hbm_fails_as_on_a_tpu_and_the_slice_serves_on(xla_world):
    if not xlasim.is_emulated():
        pytest.skip("provokes an out-of-memory on a real TPU: emulated slices only")
    started = time.monotonic()
    with pytest.raises(xlasim.RankFailedError) as failure:
        xla_world.run(train_past_the_hbm)
    assert time.monotonic() - started < 60  # refused before anything of it ran
    errors = failure.value.failures
    assert sorted(errors) == list(range(xla_world.size))
    for rank, error in errors.items():
        message = f"{type(error).__name__}: {error}"
        assert message.startswith(
            "ResourceExhaustedError: RESOURCE_EXHAUSTED: Error allocating device buffer: "
            "Attempting to allocate "
        ), message
        assert f"rank {rank} of {xla_world.size}, device xla:" in message
        # at least the weights; more where the gradients or Adam's moments exist by then
        (live,) = re.findall(r"\((\d+) bytes\) of 16\.00G \(17179869184 bytes\) of HBM", message)
        assert int(live) >= FEATURES * FEATURES * 4 > V5E_HBM, message
    for bytes_used in xla_world.run(small_step):
        assert bytes_used < 2**20


def memory_around_a_cleared_pending_tensor() -> tuple[int, int, int, int]:
    """A pending tensor whose graph torch_xla drops (`_clear_pending_irs`, as torch.compile's
    XLA backend does after tracing) never runs: it holds nothing from then on."""
    device = torch_xla.device()
    before = xm.get_memory_info()["bytes_used"]
    pending = torch.ones(512, 1024, device=device) * 2
    grown = xm.get_memory_info()["bytes_used"]
    torch_xla._XLAC._clear_pending_irs(str(device))
    cleared = xm.get_memory_info()["bytes_used"]
    return before, grown, cleared, pending.numel() * pending.element_size()


def test_a_pending_tensor_whose_graph_is_dropped_holds_nothing(xla_world):
    for rank, (before, grown, cleared, nbytes) in enumerate(
        xla_world.run(memory_around_a_cleared_pending_tensor)
    ):
        if xlasim.is_emulated():  # a TPU allocates at execution: pending tensors hold nothing
            assert grown - before == nbytes, f"on rank {rank}"
            assert cleared == before, f"on rank {rank}"


def memory_around_compiled_calls() -> tuple[int, int, int]:
    """Two input shapes through torch.compile's XLA backend: each traces, and compiles its
    graph without running it (`_xla_warm_up_cache`), which leaves the traced outputs, kept in
    the backend's cache, placeholders without a buffer. What stays live are the inputs (the
    backend keeps those it traced with) and the outputs."""
    device = torch_xla.device()
    layer = torch.nn.Linear(256, 1024, bias=False).to(device)
    compiled = torch.compile(layer, backend="openxla")
    torch_xla.sync()
    before = xm.get_memory_info()["bytes_used"]
    inputs = [torch.ones(rows, 256, device=device) for rows in (64, 128)]
    outputs = [compiled(batch) for batch in inputs]
    gc.collect()
    after = xm.get_memory_info()["bytes_used"]
    return before, after, sum(held.numel() * held.element_size() for held in inputs + outputs)


def test_compiled_calls_hold_their_outputs_not_their_traces(xla_world):
    for rank, (before, after, nbytes) in enumerate(xla_world.run(memory_around_compiled_calls)):
        if xlasim.is_emulated():
            assert after - before == nbytes, f"on rank {rank}"
