"""What of a Hugging Face checkout runs on the emulated slice, and how its TPU CI launches it.

Two checkouts are known, told apart by their `src/` package:

- accelerate: its test scripts (`src/accelerate/test_utils/scripts/**.py`) that take an XLA
  branch (they name `DistributedType.XLA` or `torch_xla`), each through
  `accelerate launch --tpu` (accelerate's TPU launcher: `xmp.spawn` over every core); and its
  pytest tests gated on a TPU (`@require_tpu`, i.e. `torch_xla.runtime.device_type() == "TPU"`),
  run under `pytest --xla-devices=N` where the gate opens by itself.
- transformers: the Trainer's TPU script `tests/trainer/test_trainer_tpu.py`, through the
  `examples/pytorch/xla_spawn.py` launcher as its header says (`--num_cores=N`), and through
  `accelerate launch --tpu` (how a TPU user launches a Trainer script today).

Files are read as text (`ast`), never imported: importing them would start an XLA runtime in
the runner.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ACCELERATE, TRANSFORMERS = "accelerate", "transformers"
#: How a job runs: a script under a launcher, or pytest test ids.
ACCELERATE_LAUNCH, XLA_SPAWN, PYTEST = "accelerate launch --tpu", "xla_spawn", "pytest"

_XLA_BRANCH = re.compile(r"DistributedType\.XLA|torch_xla")
_TPU_GATE = "require_tpu"
TRAINER_TPU_SCRIPT = "tests/trainer/test_trainer_tpu.py"
TRANSFORMERS_XLA_SPAWN = "examples/pytorch/xla_spawn.py"


@dataclass(frozen=True)
class HuggingFaceJob:
    """One subprocess: `target` (a script, or a test file) relative to the checkout `root`,
    run in `mode`; `tests`: the pytest ids of a pytest job."""

    root: Path
    target: str
    mode: str
    tests: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return self.target if self.mode == PYTEST else f"{self.target} [{self.mode}]"

    @property
    def slug(self) -> str:
        name = f"{self.target}--{self.mode}".replace("/", "__")
        return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:150]


def kind(checkout: Path) -> str:
    """Which checkout `checkout` is: ACCELERATE or TRANSFORMERS."""
    for name in (ACCELERATE, TRANSFORMERS):
        if (checkout / "src" / name / "__init__.py").is_file():
            return name
    raise FileNotFoundError(f"{checkout} holds neither src/accelerate nor src/transformers")


def discover(checkout: Path, select: str | None = None) -> list[HuggingFaceJob]:
    """The jobs of `checkout`, in a stable order.

    Args:
        checkout: the root of an accelerate or transformers checkout (the one holding `src/`).
        select: a substring a job's id (its target, and its launcher for a script) must
            contain; None: every job.
    """
    jobs = _accelerate(checkout) if kind(checkout) == ACCELERATE else _transformers(checkout)
    return [job for job in jobs if not select or select in job.id]


def _accelerate(root: Path) -> list[HuggingFaceJob]:
    jobs = []
    for path in sorted((root / "src/accelerate/test_utils/scripts").rglob("test_*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if _XLA_BRANCH.search(text) and "main" in _functions(text):
            jobs.append(HuggingFaceJob(root, path.relative_to(root).as_posix(), ACCELERATE_LAUNCH))
    for path in sorted((root / "tests").glob("test_*.py")):
        ids = _gated_tests(path, root)
        if ids:
            jobs.append(HuggingFaceJob(root, path.relative_to(root).as_posix(), PYTEST, ids))
    return jobs


def _transformers(root: Path) -> list[HuggingFaceJob]:
    if not (root / TRAINER_TPU_SCRIPT).is_file():
        return []
    jobs = [HuggingFaceJob(root, TRAINER_TPU_SCRIPT, ACCELERATE_LAUNCH)]
    if (root / TRANSFORMERS_XLA_SPAWN).is_file():
        jobs.insert(0, HuggingFaceJob(root, TRAINER_TPU_SCRIPT, XLA_SPAWN))
    return jobs


def _functions(text: str) -> set[str]:
    return {node.name for node in ast.parse(text).body if isinstance(node, ast.FunctionDef)}


def _gated_tests(path: Path, root: Path) -> tuple[str, ...]:
    """The ids of the tests in `path` decorated `@require_tpu` (methods of a class included)."""
    rel = path.relative_to(root).as_posix()
    tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    ids = []
    for node in tree.body:
        members = node.body if isinstance(node, ast.ClassDef) else [node]
        prefix = f"{rel}::{node.name}::" if isinstance(node, ast.ClassDef) else f"{rel}::"
        for member in members:
            if isinstance(member, ast.FunctionDef) and any(
                _decorator_name(d) == _TPU_GATE for d in member.decorator_list
            ):
                ids.append(prefix + member.name)
    return tuple(ids)


def _decorator_name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    return target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
