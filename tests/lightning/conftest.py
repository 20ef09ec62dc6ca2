"""fake_checkout/ is material for the runner's test (a Lightning-style tests/ tree, run by
`xlasim lightning` in its own processes), not tests of this session."""

import pytest

collect_ignore = ["fake_checkout"]


@pytest.fixture
def not_native(request) -> None:
    """Skip under the native backend: the runner emulates in processes of its own whatever the
    session runs on, so running it again in CI's native step would only repeat the emulated one."""
    config = request.config
    if config.pluginmanager.has_plugin("xlasim"):
        from xlasim.pytest_plugin.session import backend_key

        if config.stash.get(backend_key, "emulated") == "native":
            pytest.skip(
                "the Lightning runner emulates in its own processes; runs in emulated sessions"
            )
