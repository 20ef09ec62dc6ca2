"""Which of Lightning's test files hold TPU tests.

Lightning marks its TPU tests `@RunIf(tpu=True)` (with `standalone=True` for those that must run
in a process of their own). The files are read as text, never imported: importing Lightning's
tests would start an XLA runtime in the runner. The selection inside a file is Lightning's own
(`PL_RUN_TPU_TESTS=1` keeps only `RunIf(tpu=True)` tests, see its conftest), so a file listed
here by mistake contributes no rows rather than wrong ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

#: Lightning's two test trees, as its CI names them.
SUITES: dict[str, tuple[str, ...]] = {
    "pytorch": ("tests_pytorch",),
    "fabric": ("tests_fabric",),
    "all": ("tests_pytorch", "tests_fabric"),
}

_TPU_MARK = re.compile(r"RunIf\([^)]*\btpu=True")


@dataclass(frozen=True)
class TestFile:
    """A test file and the `tests/` directory it belongs to (pytest's rootdir, and the
    directory that makes `tests_pytorch.helpers` importable)."""

    tests: Path
    path: Path

    @property
    def rel(self) -> str:
        return self.path.relative_to(self.tests).as_posix()


def tests_dir(checkout: Path) -> Path:
    """The `tests/` directory of a Lightning checkout, given the checkout or `tests/` itself."""
    for candidate in (checkout / "tests", checkout):
        if (candidate / "tests_pytorch").is_dir() or (candidate / "tests_fabric").is_dir():
            return candidate
    raise FileNotFoundError(f"{checkout} holds neither tests/tests_pytorch nor tests/tests_fabric")


def discover(tests: Path, suite: str, select: str | None = None) -> list[TestFile]:
    """The files of `suite` under `tests` with at least one `RunIf(tpu=True)` test, in path
    order.

    Args:
        tests: Lightning's `tests/` directory (the runner's copy of it).
        suite: a key of `SUITES`: `pytorch`, `fabric` or `all`.
        select: a substring a file's path relative to `tests` must contain; None: every file.
    """
    found = []
    for tree in SUITES[suite]:
        for path in sorted((tests / tree).rglob("test_*.py")):
            rel = path.relative_to(tests).as_posix()
            if select and select not in rel:
                continue
            if _TPU_MARK.search(path.read_text(encoding="utf-8", errors="replace")):
                found.append(TestFile(tests, path))
    return found
