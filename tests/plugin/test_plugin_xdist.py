"""Options and pytest-xdist: each xdist worker sets up its own emulated world early enough."""

CONFTEST = """
import torch
import torch_xla
from hypothesis import settings

settings.register_profile("mine", max_examples=3)
# A conftest may use the device at import: emulation was set up before conftests load.
STARTED = torch.ones(1, device=torch_xla.device()) + 1
"""


def test_ini_devices_conftest_and_xdist(run_inner, pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nxla_devices = 4\n")
    result, got = run_inner(
        "inner_xdist.py", "-n", "2", "-v", "--hypothesis-profile=mine", "-p", "xdist"
    )
    assert set(got.values()) == {"PASSED"} and len(got) == 5, result.stdout.str()
    # Both workers ran per-rank tests, each in its own world of 4.
    result.stdout.fnmatch_lines(["*[[]gw0[]]*PASSED*test_world_of_four*"], consecutive=False)
    result.stdout.fnmatch_lines(["*[[]gw1[]]*PASSED*test_world_of_four*"], consecutive=False)
    result.stdout.fnmatch_lines(["xlasim: backend emulated, 4 XLA devices (*per xdist worker)*"])


def test_usage_errors(pytester) -> None:
    pytester.makepyfile(test_nothing="def test_nothing(): pass")
    result = pytester.runpytest_subprocess("--xla-devices=0")
    result.stderr.fnmatch_lines(["*xlasim: --xla-devices must be at least 1, got 0*"])
    assert result.ret == 4  # pytest's usage-error exit code
