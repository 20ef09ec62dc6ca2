"""The child side of `spmd/files`: a pytest session that is an SPMD world, reporting back.

Loaded with `-p` (and the xlasim plugin itself turned off) in the child session the parent
starts for one SPMD test file. Before any conftest is imported the process becomes an SPMD
world over the slice (`xlasim.spmd.start_world`); the session then writes, one JSON line each,
what it collected, collection errors, the test it starts and every test report (pytest's own
serializable form, as pytest-xdist sends them) to the file the parent reads.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from ...base.topology import Topology
from .processes import SESSION_ENV

_session: dict[str, Any] = json.loads(os.environ[SESSION_ENV])


def _write(record: dict[str, Any]) -> None:
    with open(_session["records"], "a", encoding="utf-8") as records:
        records.write(json.dumps(record) + "\n")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    from ...emulation import spmd

    topology = _session["topology"]
    spmd.start_world(None if topology is None else Topology(**topology), _session["devices"])


def pytest_collection_finish(session: pytest.Session) -> None:
    for item in session.items:
        _write({"collected": True, "nodeid": item.nodeid})


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _write({"collect_error": f"{report.nodeid}: {report.longreprtext}"})


def pytest_runtest_logstart(nodeid: str) -> None:
    _write({"started": nodeid})


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    config = _config[0]
    _write({"report": config.hook.pytest_report_to_serializable(config=config, report=report)})


_config: list[pytest.Config] = []


def pytest_configure(config: pytest.Config) -> None:
    _config.append(config)
