"""Hugging Face tests: nothing may download (the hub and datasets are offline for the whole
session, set before transformers is imported); fake_checkout/ is material for the runner's test
(run by `xlasim huggingface` in its own processes), not tests of this session."""

import os

import pytest

os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")

collect_ignore = ["fake_checkout"]


@pytest.fixture
def emulated(request) -> None:
    """Skip under the native backend: on a CPU device native torch_xla reports device type
    "CPU" (Hugging Face's TPU gates stay closed), and the tests that compare emulation with
    native torch_xla, or run emulated subprocesses, say something only in emulated sessions."""
    config = request.config
    if config.pluginmanager.has_plugin("xlasim"):
        from xlasim.pytest_plugin.session import backend_key

        if config.stash.get(backend_key, "emulated") == "native":
            pytest.skip(
                "needs the emulated slice: natively on a CPU device Hugging Face's TPU gates stay "
                "closed, and native torch_xla is what the emulated side is compared with"
            )
