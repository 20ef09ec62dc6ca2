"""Lightning's switch, as its conftest applies it: with PL_RUN_TPU_TESTS=1 (and
PL_RUN_STANDALONE_TESTS=1) only tests whose RunIf carries tpu=True (and standalone=True) are kept."""

import os


def pytest_collection_modifyitems(items, config):
    for kwarg, variable in (("tpu", "PL_RUN_TPU_TESTS"), ("standalone", "PL_RUN_STANDALONE_TESTS")):
        if os.getenv(variable, "0") != "1":
            continue
        items[:] = [
            item
            for item in items
            if any(m.name == "skipif" and m.kwargs.get(kwarg) for m in item.own_markers)
        ]
