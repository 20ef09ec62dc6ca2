"""The public types carry the name users know them by: `xlasim.RankFailedError`, not the module
of the layer that defines it (`xlasim.base.errors.RankFailedError`).

Tracebacks, `repr`s of classes and pytest's reports print a class as `__module__.__qualname__`;
docs/core-api.md and users' `except` clauses say `xlasim.X`. A class is renamed where it is
defined, not when `xlasim.X` is first read (the package imports its exports lazily): an error
raised before anyone read its name prints as the same `xlasim.X`. Pickle finds such a class as
`xlasim.X` too, through the package's lazy `__getattr__`, so errors cross from rank processes to
their parent as before (tests/test_packaging.py round-trips each in a fresh process).
"""

from __future__ import annotations

from typing import TypeVar

PACKAGE = "xlasim"
Exported = TypeVar("Exported", bound=type)


def public(cls: Exported) -> Exported:
    """Name `cls` as `xlasim.<its name>`; it must be listed in `xlasim._EXPORTS` (the packaging
    test checks both ways).

    Args:
        cls: a class exported from the package.
    """
    cls.__module__ = PACKAGE
    return cls
