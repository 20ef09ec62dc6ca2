"""pytest's own fixtures on each rank (issue 33 item 4), and a rank fixture of the user's: run
by test_plugin_rank_fixtures.py in the default mode, the threads mode and a multi-process one.
Each rank writes, logs and warns with its rank number in the text and must read back exactly
its own."""

import logging
import os
import sys
import warnings

import pytest
import torch_xla.runtime as xr

import xlasim


def _alone_in_process() -> bool:
    return xr.addressable_device_count() == 1


@pytest.mark.xla
def test_capsys(xla_rank, capsys):
    print(f"out {xla_rank.rank}")
    print(f"err {xla_rank.rank}", file=sys.stderr)
    assert capsys.readouterr() == (f"out {xla_rank.rank}\n", f"err {xla_rank.rank}\n")
    assert capsys.readouterr() == ("", "")
    with capsys.disabled():
        print(f"shown {xla_rank.rank}")
    assert capsys.readouterr() == ("", "")


@pytest.mark.xla
def test_capsysbinary(xla_rank, capsysbinary):
    print(f"out {xla_rank.rank}")
    assert capsysbinary.readouterr() == (f"out {xla_rank.rank}\n".encode(), b"")


@pytest.mark.xla
def test_capfd(xla_rank, capfd):
    print(f"out {xla_rank.rank}", flush=True)
    expected = f"out {xla_rank.rank}\n"
    if _alone_in_process():  # below Python too: its descriptors are the rank's
        os.write(2, f"fd {xla_rank.rank}\n".encode())
        assert capfd.readouterr() == (expected, f"fd {xla_rank.rank}\n")
    else:
        assert capfd.readouterr() == (expected, "")


@pytest.mark.xla
def test_capfdbinary(xla_rank, capfdbinary):
    print(f"out {xla_rank.rank}", flush=True)
    assert capfdbinary.readouterr() == (f"out {xla_rank.rank}\n".encode(), b"")


@pytest.mark.xla
def test_caplog(xla_rank, caplog):
    logging.getLogger("inner").warning("rank %d", xla_rank.rank)
    with caplog.at_level(logging.INFO, logger="inner"):
        logging.getLogger("inner").info("info %d", xla_rank.rank)
    assert caplog.messages == [f"rank {xla_rank.rank}", f"info {xla_rank.rank}"]
    assert caplog.records[0].levelno == logging.WARNING
    caplog.clear()
    assert caplog.records == []


@pytest.mark.xla
def test_recwarn(xla_rank, recwarn):
    warnings.warn(f"rank {xla_rank.rank}", UserWarning, stacklevel=1)
    assert [str(w.message) for w in recwarn] == [f"rank {xla_rank.rank}"]
    assert recwarn.pop(UserWarning).category is UserWarning


@pytest.mark.xla
def test_monkeypatch(xla_rank, monkeypatch):
    monkeypatch.setattr(logging, "xlasim_patched", "yes", raising=False)
    monkeypatch.setenv("XLASIM_INNER_PATCHED", "yes")
    assert logging.xlasim_patched == "yes"
    assert os.environ["XLASIM_INNER_PATCHED"] == "yes"


@pytest.mark.xla
def test_monkeypatch_was_undone_on_the_ranks(xla_rank):
    assert not hasattr(logging, "xlasim_patched")
    assert "XLASIM_INNER_PATCHED" not in os.environ


def test_monkeypatch_was_undone_here():
    assert not hasattr(logging, "xlasim_patched")


@xlasim.rank_fixture
def rank_label(xla_rank, capsys):
    print("set up", xla_rank.rank)
    yield f"label {xla_rank.rank}"
    print("torn down", xla_rank.rank)


@pytest.mark.xla
def test_rank_fixture(xla_rank, rank_label, capsys):
    assert rank_label == f"label {xla_rank.rank}"
    assert capsys.readouterr().out == f"set up {xla_rank.rank}\n"


@pytest.mark.xla
def test_unread_output_is_reported(xla_rank, capsys):
    print(f"unread {xla_rank.rank}")
    assert xla_rank.rank != 1
