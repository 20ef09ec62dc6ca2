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
    """What docs/architecture.md says of each folder (`base/`, `xlasim/` for the package's top):
    its row of the folders' table, and for the plugin its tree (a fenced block opening with
    `pytest_plugin/`, one line per module, subfolders indented under it)."""
    text = ARCHITECTURE.read_text()
    rows: dict[str, str] = {}
    for line in text.splitlines():
        found = re.match(r"\| `([\w/]+/)` \|(.*)", line)
        if found:
            rows[found.group(1)] = found.group(2)
    tree = re.search(r"^```\n(pytest_plugin/\n.*?)^```", text, re.S | re.M)
    folder = "pytest_plugin/"
    for line in tree.group(1).splitlines() if tree else []:
        subfolder = re.match(r"  (\w+)/", line)
        if subfolder or re.match(r"  \w+\.py", line):
            folder = f"pytest_plugin/{subfolder.group(1)}/" if subfolder else "pytest_plugin/"
        rows[folder] = rows.get(folder, "") + line
    return rows


def test_the_architecture_page_names_every_module_where_its_folder_is_described() -> None:
    rows = folder_rows()
    unnamed = []
    for path in sorted(PACKAGE.rglob("*.py")):
        folder = path.parent.relative_to(PACKAGE.parent)
        key = "xlasim/" if folder == Path("xlasim") else f"{folder.relative_to('xlasim')}/"
        named = re.search(rf"(?<![\w/]){re.escape(path.name)}\b", rows.get(key, ""))
        if path.name != "__init__.py" and not named:
            unnamed.append(f"{key}{path.name}")
    assert len(rows) > 20  # the table and the plugin's tree were read
    assert unnamed == [], (
        f"docs/architecture.md does not name, where it describes their folder: {unnamed}"
    )
