"""When the plugin wakes up: only in sessions that ask for XLA.

Installed, the plugin is loaded by every pytest run of the environment. A session asks for XLA
with an `--xla-*` option, an `xla_*` ini key, an `XLASIM_*` variable (then emulation is set up
before any conftest.py is imported), or by collecting a test that needs it (then at the end of
collection). Any other session must not pay for it: no torch_xla import, no worker process, no
header line, no Hypothesis profile of its own.
"""

import json

PROBE = """
import json
import os
import sys


def descendants(pid):
    children = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parent = stat.read().rsplit(")", 1)[1].split()[1]
        except (OSError, IndexError):
            continue
        if parent == str(pid):
            children += [int(entry), *descendants(int(entry))]
    return children


def pytest_sessionfinish(session):
    hypothesis = sys.modules.get("hypothesis")
    with open(os.environ["XLASIM_PROBE_FILE"], "w") as file:
        json.dump(
            {
                "torch_xla": "torch_xla" in sys.modules,
                "torch": "torch" in sys.modules,
                "processes": descendants(os.getpid()),
                "profile": hypothesis and hypothesis.settings.get_current_profile_name(),
            },
            file,
        )
"""

NO_XLA_TESTS = """
from hypothesis import given, settings, strategies as st


def test_plain():
    assert sum([1, 2]) == 3


@given(st.integers())
def test_property(x):
    assert not settings.get_current_profile_name().startswith("xla-")
    assert x + 0 == x
"""


def test_dormant_without_xla_tests(pytester, inner_environment) -> None:
    pytester.makeconftest(PROBE)
    pytester.makepyfile(test_project=NO_XLA_TESTS)
    probe_file = pytester.path / "probe.json"
    inner_environment.setenv("XLASIM_PROBE_FILE", str(probe_file))

    def session(*args: str) -> tuple[dict, str]:
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=300)
        return json.loads(probe_file.read_text()), result.stdout.str()

    without, _ = session("-p", "no:xlasim")
    installed, output = session()
    assert installed == without, output
    # Hypothesis picks its own profile ("default", or "ci" where a CI variable is set); xlasim's
    # profiles are the ones named xla-*.
    assert installed | {"profile": None} == {
        "torch_xla": False,
        "torch": False,
        "processes": [],
        "profile": None,
    }
    assert not installed["profile"].startswith("xla-"), installed
    assert "xlasim" not in output.replace("xlasim-0.1.0", "")  # no header lines
    assert "2 passed" in output
    # The probe sees what an active session starts: asked for by an option, the plugin imports
    # torch_xla and starts the emulated cores' worker processes.
    asked, output = session("--xla-devices=2", "-k", "plain")
    assert asked["torch_xla"] and asked["processes"], output
    assert "xlasim: backend emulated, 2 XLA devices" in output


ADOPTED = """
import xlasim

xlasim.emulate(devices=2, processes=1)  # the conftest's own slice; no option asks for one
"""

COLLECTED = """
import pytest
import torch_xla.runtime as xr
from hypothesis import given, strategies as st


@pytest.mark.xla
def test_on_ranks(xla_rank):
    assert xr.world_size() == xla_rank.world_size == 2


def square(x):
    return x * x


@given(st.integers(0, 10))
def test_with_the_world(xla_world, x):
    assert xla_world.run(square, x) == [x * x] * 2
    # The profile reaches tests that were decorated before the plugin woke up.
    assert test_with_the_world._hypothesis_internal_use_settings.deadline is None
"""


def test_a_collected_test_wakes_the_plugin(pytester, inner_environment) -> None:
    pytester.makeconftest(ADOPTED)
    pytester.makepyfile(test_collected=COLLECTED)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA", timeout=300)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "collected 2 items",
            "xlasim: backend emulated, 2 XLA devices (1 host x 1 process x 2 cores = 2 cores)*",
            "xlasim: hypothesis profile xla-emulated",
        ],
        consecutive=False,
    )


STARTED = """
import torch
import torch_xla

BEFORE_XLASIM = torch.ones(1, device=torch_xla.device())  # starts the runtime: 1 CPU device
"""


def test_runtime_started_before_a_collected_test_asks(pytester, inner_environment) -> None:
    """A conftest started the XLA runtime before anything asked for xlasim: the slice cannot be
    emulated any more, and the error says how to ask early enough."""
    inner_environment.setenv("PJRT_DEVICE", "CPU")
    inner_environment.setenv("CPU_NUM_DEVICES", "1")
    pytester.makeconftest(STARTED)
    pytester.makepyfile(
        test_collected="import pytest\n\n@pytest.mark.xla\ndef test_x(xla_rank): pass"
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=300)
    result.stderr.fnmatch_lines(
        [
            "ERROR: xlasim: the XLA runtime already started with 1 device(s)*",
            "*test_collected.py::test_x needs XLA, but no --xla-* option, xla_* ini key or "
            "XLASIM_* variable asked for it*pass --xla-devices=N*",
        ]
    )
    assert result.ret == 4  # pytest's usage-error exit code
