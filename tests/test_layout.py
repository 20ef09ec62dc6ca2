"""The package's layout as a newcomer meets it: names that cannot be mistaken for one another,
and docs/architecture.md naming every module where its folder is described.

A name one letter from another (`races/` and `traces/`, `report.py` and `reports/`) is read as
the other at a glance; a module the architecture page does not name is one a newcomer cannot
find from it. Both drift silently, so they are checked.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections import defaultdict
from pathlib import Path

import xlasim

PACKAGE = Path(xlasim.__file__).parent
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


def one_letter_apart(first: str, second: str) -> bool:
    """Whether one edit (a letter changed, added or removed) turns `first` into `second`.

    Args:
        first: a name.
        second: another name.
    """
    if first == second or abs(len(first) - len(second)) > 1:
        return False
    if len(first) == len(second):
        return sum(a != b for a, b in zip(first, second)) == 1
    shorter, longer = sorted((first, second), key=len)
    return any(longer[:i] + longer[i + 1 :] == shorter for i in range(len(longer)))


def package_names() -> set[str]:
    """The names of the package's folders and modules (`__init__` aside)."""
    folders = {path.name for path in PACKAGE.rglob("*") if path.is_dir() and "__" not in path.name}
    modules = {path.stem for path in PACKAGE.rglob("*.py") if path.stem != "__init__"}
    return folders | modules


def test_no_two_names_are_one_letter_apart() -> None:
    names = package_names()
    assert {"base", "ranks", "world"} <= names  # the package was read
    close = [
        (first, second)
        for first, second in itertools.combinations(sorted(names), 2)
        if one_letter_apart(first, second)
    ]
    assert close == [], f"folder or module names one letter apart: {close}"
    assert one_letter_apart("races", "traces") and one_letter_apart("report", "reports")


def test_no_two_classes_share_a_name_or_are_one_letter_apart() -> None:
    """Two classes of one name (`Run` of a launch and of a runner's job) or of names one letter
    apart (`Meeting`, `Meetings`) are one concept to a reader; leading underscores aside."""
    defined = defaultdict(list)
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                defined[node.name.lstrip("_")].append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert len(defined) > 100  # the classes were read
    shared = {name: places for name, places in defined.items() if len(places) > 1}
    close = [
        (first, second)
        for first, second in itertools.combinations(sorted(defined), 2)
        if one_letter_apart(first, second)
    ]
    assert shared == {} and close == [], f"shared: {shared}; one letter apart: {close}"


def folder_rows() -> dict[str, str]:
    """docs/architecture.md's table of folders: each row's folder (`base/`, `xlasim/` for the
    modules at the top) and the text that names its modules."""
    rows = {}
    for line in ARCHITECTURE.read_text().splitlines():
        found = re.match(r"\| `([\w/]+/)` \|(.*)", line)
        if found:
            rows[found.group(1)] = found.group(2)
    return rows


def test_the_architecture_page_names_every_module_in_its_folder_row() -> None:
    rows = folder_rows()
    unnamed = []
    for path in sorted(PACKAGE.rglob("*.py")):
        folder = path.parent.relative_to(PACKAGE.parent)
        key = "xlasim/" if folder == Path("xlasim") else f"{folder.relative_to('xlasim')}/"
        if path.name != "__init__.py" and f"`{path.name}`" not in rows.get(key, ""):
            unnamed.append(f"{key}{path.name}")
    assert len(rows) > 10  # the table was read
    assert unnamed == [], f"docs/architecture.md's folder rows do not name: {unnamed}"
