"""An environment variable set for a while, and put back as it was after."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def variable_set(name: str, value: str) -> Iterator[None]:
    """`name=value` in this process's environment while inside; afterwards the variable has
    its earlier value again, or is unset if it had none.

    Args:
        name: the environment variable.
        value: what it holds while inside.
    """
    saved = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            del os.environ[name]
        else:
            os.environ[name] = saved
