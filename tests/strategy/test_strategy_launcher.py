"""The launcher: global rank 0's result comes back, every rank works on its own copies, nothing is
left behind, and failures name the rank. These launch from the pytest process: emulation only."""

import tempfile

import pytest
import torch
import torch_xla
import torch_xla.runtime as xr

from strategy import SingleDeviceXLAStrategy, XLAStrategy


def _rank_report(box: list, offset: int) -> dict:
    box.append(xr.global_ordinal())  # each rank appends to its own copy of the caller's list
    tensor = torch.full((2,), float(xr.global_ordinal() + offset), device=torch_xla.device())
    return {"rank": xr.global_ordinal(), "world": xr.world_size(), "box": box, "tensor": tensor * 2}


def _fail_on_the_last_rank() -> None:
    if xr.global_ordinal() == xr.world_size() - 1:
        raise ValueError(f"boom on rank {xr.global_ordinal()}")


def test_global_rank_zero_result_comes_back_with_tensors_on_the_cpu(
    emulation_only, xla_world, monkeypatch, tmp_path
):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the launch keeps its result
    box = ["caller"]

    result = XLAStrategy().launcher.launch(_rank_report, box, offset=10)

    assert result["rank"] == 0
    assert result["world"] == xla_world.size
    assert result["box"] == ["caller", 0]  # rank 0's own copy; no other rank's append in it
    assert box == ["caller"]  # the caller's object is never modified
    assert result["tensor"].device == torch.device("cpu")
    assert result["tensor"].tolist() == [20.0, 20.0]
    assert list(tmp_path.iterdir()) == []  # the launch's result directory is gone


def test_single_device_launch_runs_here_on_copies(emulation_only):
    box = ["caller"]
    result = SingleDeviceXLAStrategy("xla:0").launcher.launch(_rank_report, box, offset=1)
    assert (result["rank"], result["world"], result["box"]) == (0, 1, ["caller", 0])
    assert box == ["caller"]


def test_a_failing_rank_is_named(emulation_only, xla_world):
    last = xla_world.size - 1  # a launch is on every core of the host: rank 0 alone on one core
    with pytest.raises(Exception, match=f"boom on rank {last}") as raised:
        XLAStrategy().launcher.launch(_fail_on_the_last_rank)
    assert f"rank {last}" in str(raised.value)


def test_unpicklable_functions_are_refused_before_anything_starts():
    with pytest.raises(TypeError, match=r"own copy of the function.*module level"):
        XLAStrategy().launcher.launch(lambda: None)
