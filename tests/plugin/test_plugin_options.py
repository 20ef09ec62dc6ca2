"""Settings errors name where the bad value came from: the command line, the environment or
the ini file (a user who set XLASIM_DEVICES=abc must not be told about --xla-devices)."""

import argparse
import re

import pytest

from xlasim.pytest_plugin.options import resolve

ENVIRONMENT = (
    "XLASIM_DEVICES",
    "XLASIM_PROCESSES",
    "XLASIM_HOSTS",
    "XLASIM_TOPOLOGY",
    "XLASIM_BACKEND",
    "XLASIM_TEST_TIMEOUT",
)


class FakeConfig:
    """What `options.resolve` reads from a pytest config: parsed options and ini values."""

    def __init__(self, ini: dict | None = None, **command_line):
        names = ("devices", "processes", "hosts", "topology", "backend", "timeout")
        values = {f"xla_{name}": None for name in names}
        self.known_args_namespace = argparse.Namespace(**{**values, **command_line})
        self._ini = ini or {}
        self.stash = pytest.Stash()

    def getini(self, name):
        return self._ini.get(name)


@pytest.fixture
def environment(monkeypatch):
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


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
    environment, variable, value, blamed, what
) -> None:
    environment.setenv(variable, value)
    message = problem()
    assert blamed in message and what in message, message
    assert "--xla" not in message, message


def test_each_source_is_named(environment) -> None:
    message = problem(xla_devices=0)
    assert "--xla-devices must be at least 1, got 0" in message
    message = problem(ini={"xla_devices": "eight"})
    assert "ini xla_devices='eight' is not a whole number" in message, message
    message = problem(ini={"xla_timeout": "0"})
    assert "ini xla_timeout must be positive" in message, message
    # A slice that does not split names every value it was made of, each by its source.
    environment.setenv("XLASIM_PROCESSES", "3")
    message = problem(xla_devices=8)
    assert re.search(r"cannot be split evenly over 3 processes.*--xla-devices=8", message)
    assert "XLASIM_PROCESSES=3" in message, message


def test_environment_error_end_to_end(pytester, environment) -> None:
    pytester.makepyfile(test_nothing="def test_nothing(): pass")
    environment.setenv("XLASIM_DEVICES", "abc")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.stderr.fnmatch_lines(["*xlasim: XLASIM_DEVICES='abc' is not a whole number*"])
    assert "--xla-devices" not in result.stderr.str()
    assert result.ret == 4  # pytest's usage-error exit code
