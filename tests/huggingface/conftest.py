"""Hugging Face tests: nothing may download (the hub and datasets are offline for the whole
session, set before transformers is imported); fake_checkout/ is material for the runner's test
(run by `xlasim huggingface` in its own processes), not tests of this session."""

import os

import pytest

os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")

collect_ignore = ["fake_checkout"]


@pytest.fixture
def emulated(request) -> None:
    """Skip under the native backend: the test compares emulation with native torch_xla (or
    runs emulated subprocesses of its own), so the emulated step is where it says something."""
    config = request.config
    if config.pluginmanager.has_plugin("xlasim"):
        from xlasim.pytest_plugin.session import backend_key

        if config.stash.get(backend_key, "emulated") == "native":
            pytest.skip("compares the emulated slice with native torch_xla: runs emulated")
