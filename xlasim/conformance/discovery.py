"""Which of torch_xla's test files to run, and how each one runs.

A file runs the way upstream runs it, as a script (`python3 test/FILE.py` in its run_tests.sh),
here under `xlasim run`: that covers files whose `__main__` block launches ranks
(`torch_xla.launch`, `xmp.spawn`) and files whose `__main__` is `absltest.main()` /
`unittest.main()`. A file that also holds TestCase classes or module-level `test_*` functions
runs under pytest as well, which reports each test on its own; a class counts as a TestCase also
through a base class in the file or in a sibling module it imports (torch_xla's test/spmd files
derive from `test_xla_sharding_base.XlaShardingTest`). A file that calls
`dist.is_torchelastic_launched()` asks to be started by torchrun (upstream runs it with
`torchrun --nproc-per-node N FILE`, and it refuses to run otherwise): it runs only that way,
under `xlasim run --torchrun`. The file, and a sibling module it imports, is read with `ast`,
never imported: importing torch_xla's tests would start an XLA runtime in the runner.

The `tpu` suite is chosen by content, not by name: every other test file with a TPU gate
(`gates`), which the emulated identity opens or closes. Each runs under pytest (its `__main__`
is `unittest.main()` or `absltest.main()`, which pytest runs test by test), first natively on
one CPU device as a baseline, then emulated, so that each test's row says what the identity
changed; a file without tests (a `torch_xla.launch` script gated in its ranks) runs as a script.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from .expectations import ONE_PROCESS_PER_TEST, SCRIPT_ARGS, SCRIPT_ONLY
from .gates import Gates, find_gates

SCRIPT = "script"
PYTEST = "pytest"
TORCHRUN = "torchrun"


@dataclass(frozen=True)
class Suite:
    """A set of files, and what a passing file must have done.

    `needs_collectives`: replica-style multi-device tests prove something only if ranks were
    launched and exchanged data, so a run without launches or collectives is a silent skip. SPMD
    tests run in one process with in-graph collectives; for them, running tests is the bar.
    """

    patterns: tuple[str, ...]
    needs_collectives: bool
    #: Only the files with a TPU gate, outside the other suites' patterns, each also run
    #: natively as a baseline.
    gated: bool = False


SUITES: dict[str, tuple[Suite, ...]] = {
    "mp": (
        Suite(
            (
                "test_mp_*.py",
                "test_train_mp_*.py",
                "torch_distributed/*.py",
                "pjrt/test_collective_ops_tpu.py",
                "pjrt/test_torchrun.py",
            ),
            needs_collectives=True,
        ),
    ),
    "spmd": (Suite(("spmd/test_*.py",), needs_collectives=False),),
}
SUITES["tpu"] = (Suite(("**/test_*.py",), needs_collectives=False, gated=True),)
SUITES["all"] = SUITES["mp"] + SUITES["spmd"] + SUITES["tpu"]
#: The files of the suites chosen by name, which a gated suite leaves to them.
_NAMED = tuple(p for name in ("mp", "spmd") for part in SUITES[name] for p in part.patterns)


@dataclass(frozen=True)
class TorchXlaJob:
    """One file in one mode; `deselect`: pytest ids not to run (tests that crashed the file);
    `test`: the one test to run (`Class::test`), when the file's tests need a process each."""

    root: Path
    path: Path
    mode: str
    needs_collectives: bool
    args: tuple[str, ...] = field(default=())
    deselect: tuple[str, ...] = field(default=())
    #: Run natively first and compare (the `tpu` suite), knowing the file's TPU gates.
    baseline: bool = False
    gates: Gates | None = None
    test: str = ""

    @property
    def rel(self) -> str:
        return self.path.relative_to(self.root).as_posix()

    @property
    def target(self) -> str:
        """What pytest or python is given: the file, or its one test."""
        return f"{self.path}::{self.test}" if self.test else str(self.path)

    @property
    def label(self) -> str:
        return f"{self.rel}{'::' + self.test if self.test else ''} [{self.mode}]"

    @property
    def slug(self) -> str:
        """A directory name for this job's files."""
        test = f".{self.test.replace('::', '.')}" if self.test else ""
        return f"{self.rel.replace('/', '__')}{test}.{self.mode}"


def discover(root: Path, suite: str, select: str | None = None) -> list[TorchXlaJob]:
    """The jobs for the files of `suite` under `root`, in path order.

    Args:
        root: torch_xla's test/ directory (in a pytorch/xla checkout).
        suite: a key of `SUITES`: `mp`, `spmd`, `tpu` or `all`.
        select: a substring a file's path relative to `root` must contain; None: every file.
    """
    jobs = []
    for part in SUITES[suite]:
        files = sorted({p for pattern in part.patterns for p in root.glob(pattern) if p.is_file()})
        for path in files:
            rel = path.relative_to(root).as_posix()
            if select and select not in rel:
                continue
            source = path.read_text(encoding="utf-8", errors="replace")
            if part.gated:
                jobs.extend(_gated_jobs(root, path, source))
                continue
            for mode in modes(source, path.parent):
                args = SCRIPT_ARGS.get(rel, ()) if mode != PYTEST else ()
                jobs.append(TorchXlaJob(root, path, mode, part.needs_collectives, args))
    return jobs


def _gated_jobs(root: Path, path: Path, source: str) -> list[TorchXlaJob]:
    """The job for a file of the `tpu` suite: none unless it has a TPU gate and is no other
    suite's; under pytest when it has tests (unless `SCRIPT_ONLY` says why not), else as a
    script when it has a `__main__` block (a launch script whose ranks check the hardware, so
    it must launch and run collectives to pass); none for a helper module (`test_utils.py`)."""
    tree = _parse(source)
    if tree is None or any(path.relative_to(root).match(p) for p in _NAMED):
        return []
    gates = find_gates(tree)
    if not gates.anywhere:
        return []
    rel = path.relative_to(root).as_posix()
    has_tests = _has_tests(tree, _sibling_test_cases(tree, path.parent))
    if has_tests and rel in ONE_PROCESS_PER_TEST:
        return [
            TorchXlaJob(root, path, PYTEST, False, baseline=True, gates=gates, test=test)
            for test in ONE_PROCESS_PER_TEST[rel]
        ]
    if has_tests and rel not in SCRIPT_ONLY:
        return [TorchXlaJob(root, path, PYTEST, False, baseline=True, gates=gates)]
    if _has_main(tree):
        # A launch script must launch and run collectives; a test file run as a script
        # (SCRIPT_ONLY) reports through unittest's verdict.
        args = SCRIPT_ARGS.get(rel, ())
        return [TorchXlaJob(root, path, SCRIPT, not has_tests, args, baseline=True, gates=gates)]
    return []


def modes(source: str, folder: Path | None = None) -> list[str]:
    """How a file with this source (in `folder`, where its sibling modules are) runs: under
    torchrun, or as a script, pytest, or both (script first).

    A file with neither a `__main__` block nor tests still runs as a script, so that it shows
    up in the table (as having checked nothing) instead of silently dropping out.

    Args:
        source: the file's Python source (unparsable: it runs as a script, which reports the
            error).
        folder: the file's directory, where its sibling modules are read for TestCase base
            classes; None: only the file's own classes count.
    """
    tree = _parse(source)
    if tree is None:
        return [SCRIPT]  # the run reports the error
    if _asks_for_torchrun(tree):
        return [TORCHRUN]
    inherited = _sibling_test_cases(tree, folder) if folder else frozenset()
    has_tests = _has_tests(tree, inherited)
    found = [SCRIPT] if _has_main(tree) or not has_tests else []
    if has_tests:
        found.append(PYTEST)
    return found


def _parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


def _asks_for_torchrun(tree: ast.Module) -> bool:
    """Whether the file calls `is_torchelastic_launched()` (torch.distributed's test for having
    been started by torchrun); a comment or string that mentions torchrun is not asking."""
    return any(
        isinstance(node, ast.Call) and _base_name(node.func) == "is_torchelastic_launched"
        for node in ast.walk(tree)
    )


def _has_main(tree: ast.Module) -> bool:
    return any(isinstance(node, ast.If) and _is_main_test(node.test) for node in tree.body)


def _is_main_test(test: ast.expr) -> bool:
    if not (isinstance(test, ast.Compare) and len(test.comparators) == 1):
        return False
    sides = {_constant_or_name(test.left), _constant_or_name(test.comparators[0])}
    return sides == {"__name__", "'__main__'"}


def _constant_or_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return repr(node.value)
    return None


def _has_tests(tree: ast.Module, inherited: frozenset[str] = frozenset()) -> bool:
    """TestCase subclasses with test methods, or module-level `test_*` functions; `inherited`:
    how the file names TestCase classes of its sibling modules (`_sibling_test_cases`).

    Plain `class Test...:` helpers are not counted although pytest would collect them: torch_xla
    uses them as code its ranks call (torch_distributed/test_torch_distributed_fsdp_meta.py), and
    on pytest's main thread they would run on one device, outside any launch.
    """
    test_cases = _test_cases(tree, inherited)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            return True
        if (
            isinstance(node, ast.ClassDef)
            and node.name in test_cases
            and any(
                isinstance(item, ast.FunctionDef) and item.name.startswith("test")
                for item in node.body
            )
        ):
            return True
    return False


#: Base classes of tests: unittest's and absl's `TestCase`s, and torch's `DeviceTypeTestBase`
#: (test_python_ops.py's classes derive from it through pytorch_test_base.XLATestBase; torch's
#: `instantiate_device_type_tests` makes the classes pytest collects).
_TEST_BASES = ("TestCase", "TestBase")


def _test_cases(tree: ast.Module, inherited: frozenset[str] = frozenset()) -> set[str]:
    """The classes `tree` defines that derive from a `TestCase` (`unittest.TestCase`,
    `parameterized.TestCase`, ...) or a `DeviceTypeTestBase`: directly, through a class defined before them in the file
    (test_xla_distributed_checkpoint.py's `DistributedCheckpointTestBase`), or through one of
    `inherited`."""
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and any(
            _base_name(base).endswith(_TEST_BASES) or _dotted_name(base) in found | inherited
            for base in node.bases
        ):
            found.add(node.name)
    return found


def _sibling_test_cases(tree: ast.Module, folder: Path) -> frozenset[str]:
    """The names under which the file's module-level imports bind TestCase classes of its
    sibling modules in `folder`: `module.Class` after `import module`, `Class` after
    `from module import Class`. torch_xla's test/spmd files derive from
    `test_xla_sharding_base.XlaShardingTest` this way; they run with their folder on the path,
    as a script does. The sibling is parsed, like the file, never imported."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                classes = _module_test_cases(folder, alias.name)
                names.update(f"{alias.asname or alias.name}.{name}" for name in classes)
        elif isinstance(node, ast.ImportFrom) and node.module:
            classes = _module_test_cases(folder, node.module)
            names.update(
                alias.asname or alias.name for alias in node.names if alias.name in classes
            )
    return frozenset(names)


def _module_test_cases(folder: Path, module: str) -> set[str]:
    """The TestCase classes of `module` when it is a sibling module in `folder`."""
    path = folder / f"{module}.py"
    if "." in module or not path.is_file():
        return set()
    tree = _parse(path.read_text(encoding="utf-8", errors="replace"))
    return _test_cases(tree) if tree else set()


def _base_name(base: ast.expr) -> str:
    if isinstance(base, ast.Name):
        return base.id
    if isinstance(base, ast.Attribute):
        return base.attr
    return ""


def _dotted_name(base: ast.expr) -> str:
    """`module.Class` for a base written so, `Class` for a bare name, else ""."""
    if isinstance(base, ast.Attribute):
        outer = _dotted_name(base.value)
        return f"{outer}.{base.attr}" if outer else ""
    return _base_name(base)
