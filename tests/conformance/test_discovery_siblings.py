"""The runner's discovery counts the tests of classes that derive from `unittest.TestCase` through
a base class in a sibling module, as torch_xla's test/spmd files do through
`test_xla_sharding_base.XlaShardingTest`: such a file runs under pytest too, one row per test.

Small files of our own in that style, in a miniature test/spmd folder; nothing is run or imported.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from xlasim.conformance.discovery import PYTEST, SCRIPT, discover

MAIN = "\n\nif __name__ == '__main__':\n  unittest.main()\n"

# The shared base, as test/spmd/test_xla_sharding_base.py: no tests, no __main__ block.
BASE = """
import unittest


class ShardingBase(unittest.TestCase):

  @classmethod
  def setUpClass(cls):
    pass


class Mixin:
  pass
"""

FILES = {
    # `import module` and `module.Class`, as every test/spmd file does.
    "test_via_module.py": """
import unittest
import sharding_base


class ViaModuleTest(sharding_base.ShardingBase):

  def test_a(self):
    pass
""",
    # `from module import Class as Alias`.
    "test_via_alias.py": """
import unittest
from sharding_base import ShardingBase as Base


class ViaAliasTest(Base):

  def test_a(self):
    pass
""",
    # A base of the file's own between them, as test_xla_distributed_checkpoint.py has.
    "test_via_own_base.py": """
import unittest
import sharding_base


class OwnBase(sharding_base.ShardingBase):
  pass


class ViaOwnBaseTest(OwnBase):

  def test_a(self):
    pass
""",
    # The sibling's class that is not a TestCase, and a module that is not a sibling.
    "test_not_cases.py": """
import unittest
import sharding_base
import elsewhere


class Helper(sharding_base.Mixin):

  def test_a(self):
    pass


class Elsewhere(elsewhere.ShardingBase):

  def test_a(self):
    pass
""",
}


@pytest.fixture
def spmd_tree(tmp_path: Path) -> Path:
    """A miniature torch_xla test/ directory with a spmd/ folder of the files above."""
    root = tmp_path / "test"
    (root / "spmd").mkdir(parents=True)
    (root / "spmd" / "sharding_base.py").write_text(BASE)
    for name, text in FILES.items():
        (root / "spmd" / name).write_text(text + MAIN)
    return root


def test_classes_deriving_from_a_sibling_test_case_run_under_pytest_too(spmd_tree: Path) -> None:
    jobs = [(job.rel, job.mode) for job in discover(spmd_tree, "spmd")]
    assert jobs == [
        ("spmd/test_not_cases.py", SCRIPT),
        ("spmd/test_via_alias.py", SCRIPT),
        ("spmd/test_via_alias.py", PYTEST),
        ("spmd/test_via_module.py", SCRIPT),
        ("spmd/test_via_module.py", PYTEST),
        ("spmd/test_via_own_base.py", SCRIPT),
        ("spmd/test_via_own_base.py", PYTEST),
    ]
