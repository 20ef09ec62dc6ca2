"""A conftest cannot silently change the slice the session asked for (issue 13, item 6).

`--xla-devices=8` sets the slice up before any conftest.py is imported; a conftest that then
calls `xlasim.emulate(devices=4)` used to get its 4 cores while the header still said 8.
"""

OVERRIDE = """
import xlasim

xlasim.emulate(devices=4)  # not the slice the command line asked for
"""


def test_conftest_cannot_change_the_slice(pytester, inner_environment) -> None:
    """`--xla-devices=8` set the slice up before conftests; a conftest asking for another one
    gets a clear error instead of a silently different slice (issue 13, item 6)."""
    pytester.makeconftest(OVERRIDE)
    pytester.makepyfile(test_x="import pytest\n\n@pytest.mark.xla\ndef test_x(xla_rank): pass")
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--xla-devices=8", "--xla-processes=1", timeout=300
    )
    output = result.stdout.str() + result.stderr.str()
    assert (
        "RuntimeAlreadyStartedError: emulation already started as 1 host x 1 process x 8 cores = "
        in output
    ), output
    assert "so it cannot become 1 host x 4 processes x 1 core = 4 cores" in output, output
    assert result.ret != 0 and "passed" not in output
