"""Inner tests for test_plugin_reports.py: ranks that fail alike, and the two run conventions."""

import pytest
import torch_xla.runtime as xr

import xlasim


@pytest.mark.xla
def test_all_ranks_fail_alike(xla_rank):
    print("every rank prints this")
    assert xla_rank.world_size == 3, "every rank sees 4"


@pytest.mark.xla
def test_two_ways(xla_rank):
    if xla_rank.rank % 2:
        raise ValueError("odd ranks")
    raise KeyError("even ranks")


def rank_argument(rank):  # the convention of xlasim.world().run and xmp.spawn
    return rank


def test_world_run_convention(xla_world):
    xla_world.run(rank_argument)  # calls rank_argument() on every rank


def no_rank():  # the convention of xla_world.run and pjrt.run_multiprocess
    return xr.global_ordinal()


def test_core_run_convention():
    xlasim.world().run(no_rank)  # calls no_rank(rank) on every rank


def calls_badly():
    return rank_argument()  # a TypeError about another call, inside fn: no hint


def test_type_error_inside(xla_world):
    xla_world.run(calls_badly)
