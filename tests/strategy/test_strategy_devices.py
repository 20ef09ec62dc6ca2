"""Device selection: the forms of `devices` the TPU guide documents, and clear errors otherwise."""

import pytest
import torch
import torch_xla.core.xla_model as xm

from strategy import (
    DeviceSelectionError,
    SingleDeviceXLAStrategy,
    XLAStrategy,
    available_devices,
    parse_devices,
    strategy_for,
)
from strategy.launching import XLALauncher


def xla(*indices):
    return [torch.device("xla", i) for i in indices]


@pytest.mark.parametrize(
    ("devices", "expected"),
    [(1, xla(0)), (8, xla(*range(8))), ("auto", xla(*range(8))), ([1], xla(1)), ((7,), xla(7))],
)
def test_documented_forms(devices, expected):
    assert parse_devices(devices, available=8) == expected


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        (4, "devices=4: this host has 8 XLA cores and runs either one of them or all"),
        (0, "devices=0: this host has 8"),
        (16, "devices=16: this host has 8"),
        ([8], r"core 8 does not exist, this host has cores 0\.\.7"),
        ([-1], "core -1 does not exist"),
        ([0, 1], "a list selects exactly one core"),
        ([], "a list selects exactly one core"),
        (True, "devices=True is not understood"),
        ("8", "devices='8' is not understood"),
        (2.0, "devices=2.0 is not understood"),
        ("tpu", "devices='tpu' is not understood"),
    ],
)
def test_anything_else_is_an_error_that_shows_the_valid_forms(devices, message):
    with pytest.raises(DeviceSelectionError, match=message) as raised:
        parse_devices(devices, available=8)
    assert "devices='auto'" in str(raised.value)


def test_no_xla_device_says_how_to_get_one():
    with pytest.raises(DeviceSelectionError, match=r"no XLA device.*PJRT_DEVICE=TPU.*xlasim"):
        parse_devices("auto", available=0)


def host_cores() -> int:
    """The cores the launching process sees: its host's (all of them on a one-host slice)."""
    return len(xm.get_xla_supported_devices())


def test_available_devices_counts_the_emulated_cores(xla_world):
    assert available_devices() == host_cores()


def test_strategy_for_picks_single_or_multi_device(xla_world):
    single = strategy_for([host_cores() - 1])
    assert isinstance(single, SingleDeviceXLAStrategy)
    assert single.root_device == torch.device("xla", host_cores() - 1)
    assert (single.world_size, single.global_rank, single.is_global_zero) == (1, 0, True)
    every = strategy_for("auto")
    if host_cores() == 1:  # every core is one core: the single-device strategy on it
        assert type(every) is SingleDeviceXLAStrategy
        assert every.root_device == torch.device("xla", 0)
    else:
        assert type(every) is XLAStrategy
        assert every.parallel_devices == xla(*range(host_cores()))


def test_launching_on_a_subset_of_the_cores_is_refused(xla_world):
    strategy = XLAStrategy(parallel_devices=xla(0, 1))
    with pytest.raises(DeviceSelectionError, match="2 devices were selected but this host has"):
        XLALauncher(strategy).launch(print)
