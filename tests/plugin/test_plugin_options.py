"""Settings: the slice and backend chosen from the command line, the environment and the ini
file, in that order of precedence, and errors that name where the bad value came from (a user
who set XLASIM_DEVICES=abc must not be told about --xla-devices). `inner_environment`
(conftest.py) clears the outer session's XLASIM_* choices."""

import argparse
import re

import pytest

from xlasim.pytest_plugin.options.settings import PodOptions, resolve


class FakeConfig:
    """What `options.resolve` reads from a pytest config: parsed options and ini values."""

    def __init__(self, ini: dict | None = None, **command_line):
        names = ("devices", "processes", "hosts", "topology", "backend", "timeout", "arithmetic")
        values = {f"xla_{name}": None for name in names}
        self.known_args_namespace = argparse.Namespace(**{**values, **command_line})
        self._ini = ini or {}
        self.stash = pytest.Stash()

    def getini(self, name):
        return self._ini.get(name)


def problem(ini=None, **command_line) -> str:
    with pytest.raises(pytest.UsageError) as error:
        resolve(FakeConfig(ini, **command_line))
    return str(error.value)


@pytest.mark.parametrize(
    ("variable", "value", "blamed", "what"),
    [
        ("XLASIM_DEVICES", "abc", "XLASIM_DEVICES='abc'", "is not a whole number"),
        ("XLASIM_PROCESSES", "0", "XLASIM_PROCESSES", "must be at least 1, got 0"),
        ("XLASIM_HOSTS", "two", "XLASIM_HOSTS='two'", "is not a whole number"),
        ("XLASIM_TEST_TIMEOUT", "soon", "XLASIM_TEST_TIMEOUT='soon'", "is not a number"),
        ("XLASIM_TEST_TIMEOUT", "-1", "XLASIM_TEST_TIMEOUT", "must be positive"),
        ("XLASIM_BACKEND", "tpu", "XLASIM_BACKEND='tpu'", "is not one of auto, emulated"),
        ("XLASIM_TOPOLOGY", "v9-9", "XLASIM_TOPOLOGY", "unknown topology 'v9-9'"),
    ],
)
def test_environment_values_are_blamed_on_the_environment(
    inner_environment, variable, value, blamed, what
) -> None:
    inner_environment.setenv(variable, value)
    message = problem()
    assert blamed in message and what in message, message
    assert "--xla" not in message, message


def test_each_source_is_named(inner_environment) -> None:
    message = problem(xla_devices=0)
    assert "--xla-devices must be at least 1, got 0" in message
    message = problem(ini={"xla_devices": "eight"})
    assert "ini xla_devices='eight' is not a whole number" in message, message
    message = problem(ini={"xla_timeout": "0"})
    assert "ini xla_timeout must be positive" in message, message
    # A slice that does not split names every value it was made of, each by its source.
    inner_environment.setenv("XLASIM_PROCESSES", "3")
    message = problem(xla_devices=8)
    assert re.search(r"cannot be split evenly over 3 processes.*--xla-devices=8", message)
    assert "XLASIM_PROCESSES=3" in message, message


def test_the_arithmetic_comes_from_the_command_line_else_the_environment_else_the_ini(
    inner_environment,
) -> None:
    """None leaves the choice to `XLASIM_ARITHMETIC` (the core reads it), else the TPU's."""
    assert resolve(FakeConfig(xla_arithmetic="exact")).arithmetic == "exact"
    assert resolve(FakeConfig({"xla_arithmetic": "exact"})).arithmetic == "exact"
    assert resolve(FakeConfig()).arithmetic is None
    message = problem(ini={"xla_arithmetic": "f64"})
    assert "ini xla_arithmetic='f64': the arithmetic is 'tpu' (default) or 'exact'" in message
    inner_environment.setenv("XLASIM_ARITHMETIC", "tpu")
    assert resolve(FakeConfig({"xla_arithmetic": "exact"})).arithmetic is None
    assert resolve(FakeConfig(xla_arithmetic="exact")).arithmetic == "exact"


ARITHMETIC_TEST = """
import pytest
import torch
import torch_xla


@pytest.mark.xla
def test_product(xla_rank):
    a, b = torch.full((1, 1), 1 + 2**-12), torch.ones(1, 1)
    got = (a.to(torch_xla.device()) @ b.to(torch_xla.device())).item()
    print("product", got)
"""


@pytest.mark.parametrize(
    ("option", "expected"), [((), 1.0), (("--xla-arithmetic=exact",), 1 + 2**-12)]
)
def test_the_arithmetic_option_reaches_the_ranks(pytester, inner_environment, option, expected):
    """The rank (a worker process) computes as the TPU's MXU, bf16 operands, unless asked."""
    pytester.makepyfile(test_arithmetic=ARITHMETIC_TEST)
    result = pytester.runpytest_subprocess(
        "--xla-devices=1", *option, "-s", "-p", "no:cacheprovider"
    )
    assert result.ret == 0, result.stdout.str()
    assert result.stdout.str().count(f"product {expected}") == 1, result.stdout.str()


def test_environment_error_end_to_end(pytester, inner_environment) -> None:
    pytester.makepyfile(test_nothing="def test_nothing(): pass")
    inner_environment.setenv("XLASIM_DEVICES", "abc")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.stderr.fnmatch_lines(["*xlasim: XLASIM_DEVICES='abc' is not a whole number*"])
    assert "--xla-devices" not in result.stderr.str()
    assert result.ret == 4  # pytest's usage-error exit code


def test_pod_settings_come_from_each_source_and_are_checked(inner_environment) -> None:
    """`--xla-machines` and its companions (docs/pods.md): flags over environment over ini, a
    pod of one machine is no pod, and bad values are blamed on where they came from."""
    assert resolve(FakeConfig(xla_machines=1)).pod is None
    inner_environment.setenv("XLASIM_MACHINES", "2")
    inner_environment.setenv("XLASIM_RENDEZVOUS", "10.231.0.1:29500")
    inner_environment.setenv("XLASIM_POD_TOKEN", "secret")
    ini = {"xla_machine_rank": "1", "xla_rendezvous": "10.9.9.9:1"}
    chosen = resolve(FakeConfig(ini, xla_machines=4)).pod
    assert chosen == PodOptions(4, 1, "10.231.0.1:29500", "secret")
    inner_environment.delenv("XLASIM_RENDEZVOUS")
    assert "xlasim: a pod of 2 machines needs --xla-rendezvous=HOST:PORT" in problem()
    message = problem({"xla_rendezvous": "nowhere"})
    assert "ini xla_rendezvous: rendezvous 'nowhere' is not HOST:PORT" in message, message
    message = problem({"xla_rendezvous": "h:1"}, xla_machine_rank=2)
    assert "--xla-machine-rank=2: a machine rank of a pod of 2 machines is 0-1" in message
    message = problem({"xla_rendezvous": "h:1"}, xla_machine_rank=-1)
    assert "--xla-machine-rank must be at least 0, got -1" in message, message


@pytest.mark.parametrize(
    ("option", "refusal"),
    [
        ("--xla-backend=native", "the native backend runs on the TPU pod's own hosts"),
        ("-n1", "--xla-machines and xdist (-n) do not mix"),
    ],
)
def test_a_pod_is_refused_where_it_cannot_run(pytester, inner_environment, option, refusal):
    pytester.makepyfile(test_nothing="def test_nothing(): pass")
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--xla-machines=2", "--xla-rendezvous=127.0.0.1:1", option
    )
    result.stderr.fnmatch_lines([f"*{refusal}*"])
    assert result.ret == 4  # pytest's usage-error exit code


def test_topology_settings_and_their_precedence(inner_environment) -> None:
    def slice_of(ini=None, **command_line):
        settings = resolve(FakeConfig(ini, **command_line))
        return settings.describe_slice(), settings.topology_on_command_line

    assert slice_of() == ("1 host x 8 processes x 1 core = 8 cores", False)  # one per chip
    assert slice_of(xla_processes=1)[0] == "1 host x 1 process x 8 cores = 8 cores"
    assert slice_of(xla_devices=8, xla_processes=8, xla_hosts=2)[0] == (
        "2 hosts x 4 processes x 1 core = 8 cores"
    )
    assert slice_of(ini={"xla_topology": "v3-8"}) == (
        "v3-8: 1 host x 4 processes x 2 cores = 8 cores",
        False,
    )
    # The environment beats the ini file; the command line beats both, a name or counts whole.
    inner_environment.setenv("XLASIM_PROCESSES", "2")
    assert slice_of(ini={"xla_processes": "4"})[0] == "1 host x 2 processes x 4 cores = 8 cores"
    assert slice_of(xla_topology="v4-8") == ("v4-8: 1 host x 4 processes x 1 core = 4 cores", True)
    inner_environment.setenv("XLASIM_TOPOLOGY", "v4-16")
    assert slice_of(xla_devices=4)[0] == "1 host x 2 processes x 2 cores = 4 cores"
    inner_environment.delenv("XLASIM_PROCESSES")
    inner_environment.setenv("XLASIM_TOPOLOGY", "v4-16")
    assert (
        slice_of(ini={"xla_devices": "4"})[0] == "v4-16: 2 hosts x 4 processes x 1 core = 8 cores"
    )
    # A name and counts at the same level must agree; slices must split; names must exist.
    problems = {
        "topology 'v4-8' is 1 host x 4 processes x 1 core = 4 cores, but --xla-devices": {
            "xla_topology": "v4-8",
            "xla_devices": 8,
        },
        "8 cores cannot be split evenly over 3 processes": {"xla_devices": 8, "xla_processes": 3},
        "4 processes cannot be split evenly over 3 hosts": {"xla_processes": 4, "xla_hosts": 3},
        "unknown topology 'v9-9'; known: cpu-8, v2-8": {"xla_topology": "v9-9"},
        "--xla-hosts must be at least 1, got 0": {"xla_hosts": 0},
    }
    inner_environment.delenv("XLASIM_TOPOLOGY")
    for message, command_line in problems.items():
        with pytest.raises(pytest.UsageError, match=re.escape(message)):
            resolve(FakeConfig(**command_line))


def test_topology_options_end_to_end(pytester, inner_environment) -> None:
    pytester.makepyfile(test_nothing="def test_nothing(): pass")
    # A named preset in the header; a session that only collects starts no worker process.
    result = pytester.runpytest_subprocess("--xla-topology=v4-8", "--collect-only")
    result.stdout.fnmatch_lines(
        ["xlasim: backend emulated, 4 XLA devices (v4-8: 1 host x 4 processes x 1 core = 4 cores)*"]
    )
    result = pytester.runpytest_subprocess("--xla-backend=native", "--xla-processes=2")
    result.stderr.fnmatch_lines(["*the native backend runs the slice it finds*"])
    assert result.ret == 4  # pytest's usage-error exit code
