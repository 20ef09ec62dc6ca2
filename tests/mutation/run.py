"""The mutation run: proof that the suite fails on broken builds.

    python tests/mutation/run.py                # every mutant, against the working tree's files
    python tests/mutation/run.py --rev HEAD     # against a commit instead
    python tests/mutation/run.py --only retie-skipped sampler-local-rank
    python tests/mutation/run.py --list
    python tests/mutation/run.py --suite tests/properties   # what the property suite alone catches
    python tests/mutation/run.py --rev HEAD --only abort-not-released   # committed code only

1. Snapshot: the tracked files (`git ls-files`) are copied from the working tree (or a commit,
   `--rev`) into a temporary directory, once. The working tree is never modified, and edits made
   in it while the run goes on do not leak into it.
2. Isolation: the venv has the working tree installed editable, so each suite runs with the copy
   as working directory and first on PYTHONPATH; a check prints where `strategy` and `xlasim` are
   imported from, and two sanity mutants that break those imports must fail the suite with
   their own message.
3. Baseline: the unmutated copy must pass (a red baseline would "catch" every mutant). Its
   per-test durations order the tests fastest first for the mutants' runs (the same tests).
4. Each mutant (tests/mutation/mutants.py and the subsystems' *_mutants.py) is applied to a
   fresh copy of the snapshot and its suite runs against it with
   `--xla-devices=8 -x -p no:cacheprovider` and the `xla-mutation` Hypothesis profile
   (tests/mutation/mutation_profile.py). A failing suite catches the mutant. A mutant's suite
   is the tests it names (a subsystem's own: `Mutant.suite`), else `SUITE` (tests/properties
   and tests/strategy whole, and the core's and the plugin's tests of collectives, failure
   reports and settling); `--suite` gives every mutant the same one.

One line per mutant; the last line is `mutation score: K/M`. Exit status: 0 when every mutant
is caught, 1 when one survives, 2 when the run cannot be trusted (a mutant does not apply, the
baseline fails, the copy's packages are not the ones imported).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from mutants import MUTANTS, SANITY, Mutant, MutantDoesNotApply  # noqa: E402

#: The strategy's and the properties' suites, and the core's and the plugin's tests of what the
#: core and plugin mutants break: collectives, failure reports (mismatch, deadlock, abort),
#: settling per-rank outcomes into one test outcome. The subsystems' mutants (races, TPU,
#: traces, events) name their own suites.
SUITE = (
    "tests/properties",
    "tests/strategy",
    "tests/core/test_collectives.py",
    "tests/core/test_failures.py",
    "tests/plugin/test_plugin_settle.py",
    "tests/plugin/test_plugin_emulated.py",
)
#: What the sanity mutants must break: tests that import both packages as they are collected
#: (a broken import fails at once, whatever the mutants' own suites import).
SANITY_SUITE = ["tests/strategy"]
PYTEST_OPTIONS = (
    "--xla-devices=8",
    "-x",
    "-q",
    "-p",
    "no:cacheprovider",
    "-p",
    "mutation_profile",
    "--hypothesis-profile=xla-mutation",
    "--xla-timeout=120",
)
SUITE_TIMEOUT_S = 900
IGNORED = shutil.ignore_patterns("__pycache__", ".hypothesis", ".pytest_cache")


@dataclass
class Outcome:
    returncode: int | None  # None: timed out
    seconds: float
    output: str

    @property
    def failed(self) -> bool:
        return self.returncode != 0

    def first_failure(self) -> str:
        """The first FAILED/ERROR line of pytest's summary, else the last line of output."""
        if self.returncode is None:
            return f"timed out after {self.seconds:.0f} s"
        lines = [line.strip() for line in self.output.splitlines() if line.strip()]
        for line in lines:
            if line.startswith(("FAILED ", "ERROR ")):
                return line
        return lines[-1] if lines else f"exit status {self.returncode}"


def python() -> str:
    """The interpreter with pytest and torch_xla: the repository's venv if there is one."""
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def snapshot(destination: Path, rev: str | None) -> None:
    """The tracked files, from the working tree or from commit `rev`, under `destination`."""
    destination.mkdir(parents=True)
    if rev is not None:
        archive = subprocess.run(["git", "archive", rev], cwd=ROOT, check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(destination)], input=archive.stdout, check=True)
        return
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True)
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = ROOT / name
        if source.is_file():  # not deleted in the working tree
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def environment(copy: Path) -> dict[str, str]:
    """The copy first on the import path (the venv's editable install points at the working tree)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTHONPATH")}
    env["PYTHONPATH"] = os.pathsep.join([str(copy), str(copy / "tests" / "mutation")])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run(command: list[str], copy: Path, timeout: float) -> Outcome:
    """Run `command` in `copy`; on timeout kill its whole process group."""
    start = time.monotonic()
    process = subprocess.Popen(
        command,
        cwd=copy,
        env=environment(copy),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
        returncode: int | None = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        returncode = None
    return Outcome(returncode, time.monotonic() - start, output)


def run_suite(copy: Path, targets: list[str], timeout: float, junit: Path | None = None) -> Outcome:
    command = [python(), "-m", "pytest", *PYTEST_OPTIONS, *targets]
    if junit is not None:
        command += ["--junitxml", str(junit)]
    return run(command, copy, timeout)


def check_isolation(copy: Path) -> None:
    """The copy's `strategy` and `xlasim` are the ones imported, not the working tree's."""
    probe = "import strategy, xlasim, mutation_profile\nprint(strategy.__file__)\nprint(xlasim.__file__)"
    outcome = run([python(), "-c", probe], copy, 300)
    paths = [Path(line) for line in outcome.output.splitlines()[-2:]]
    if outcome.failed or not all(p.resolve().is_relative_to(copy.resolve()) for p in paths):
        sys.exit(f"the copy's packages are not the ones imported:\n{outcome.output}")
    print(f"isolation: strategy and xlasim import from the copy ({copy})", flush=True)


def fastest_first(junit: Path, copy: Path) -> list[str]:
    """The baseline's tests as node ids, fastest first (setup included), so that a mutant is
    caught as early as possible; which tests run stays the whole of SUITE."""
    seconds: dict[str, float] = {}
    for case in ElementTree.parse(junit).iter("testcase"):
        parts = case.get("classname", "").split(".")
        for end in range(len(parts), 0, -1):
            module = "/".join(parts[:end]) + ".py"
            if (copy / module).is_file():
                node = "::".join([module, *parts[end:], case.get("name", "")])
                seconds[node] = seconds.get(node, 0.0) + float(case.get("time", 0))
                break
    return sorted(seconds, key=seconds.get)


def within(targets: list[str], suite: tuple[str, ...] | list[str]) -> list[str]:
    """The baseline's node ids (fastest first) that belong to `suite`'s paths."""
    paths = [path.rstrip("/") for path in suite]
    return [t for t in targets if any(t == p or t.startswith((p + "/", p + "::")) for p in paths)]


def fresh_copy(base: Path, work: Path, mutant: Mutant) -> Path:
    copy = work / mutant.name
    shutil.copytree(base, copy, ignore=IGNORED)
    mutant.apply(copy)
    return copy


def report(label: str, outcome: Outcome, name: str, detail: str) -> None:
    print(f"{label:<9} {outcome.seconds:6.1f}s  {name:<42} {detail[:110]}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", help="copy this commit instead of the working tree's files")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run these mutants only")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copies")
    parser.add_argument(
        "--suite",
        nargs="+",
        metavar="PATH",
        help="test directories or files to run for every mutant (default: each mutant's own "
        f"tests, else {' '.join(SUITE)})",
    )
    parser.add_argument(
        "--suite-timeout",
        type=float,
        default=SUITE_TIMEOUT_S,
        metavar="SECONDS",
        help=f"bound on one run of the suite (default {SUITE_TIMEOUT_S}; raise it on a loaded machine)",
    )
    options = parser.parse_args(argv)

    if options.list:
        for m in MUTANTS:
            print(f"{m.name:<42} {', '.join(sorted({e.path for e in m.edits}))}: {m.why}")
        return 0
    chosen = [m for m in MUTANTS if not options.only or m.name in options.only]
    unknown = set(options.only or ()) - {m.name for m in MUTANTS}
    if unknown:
        sys.exit(f"unknown mutants: {', '.join(sorted(unknown))} (see --list)")

    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="xlasim-mutation-"))
    try:
        base = work / "base"
        snapshot(base, options.rev)
        source = f"commit {options.rev}" if options.rev else "the working tree"
        suites = {m.name: tuple(options.suite or m.suite or SUITE) for m in chosen}
        everything = sorted({path for suite in suites.values() for path in suite})
        print(
            f"mutation run: {len(chosen)} mutants against {source}; suites {' '.join(everything)}"
        )
        for m in (*SANITY, *chosen):  # every mutant must still apply before anything runs
            try:
                m.patched(base)
            except (MutantDoesNotApply, FileNotFoundError) as error:
                print(f"error: {error}", file=sys.stderr)
                return 2
        check_isolation(base)

        junit = work / "baseline.xml"
        baseline = run_suite(base, everything, options.suite_timeout, junit)
        if baseline.failed:
            print(baseline.output[-5000:])
            print(f"baseline fails without any mutant: {baseline.first_failure()}")
            return 2
        targets = fastest_first(junit, base)
        report(
            "baseline",
            baseline,
            "(no mutant)",
            f"passed: {len(targets)} tests, ordered fastest first",
        )

        for m in SANITY:
            outcome = run_suite(fresh_copy(base, work, m), SANITY_SUITE, options.suite_timeout)
            if not (outcome.failed and "sanity mutant" in outcome.output):
                print(outcome.output[-3000:])
                print(f"sanity mutant {m.name} was not seen: the copy is not what is tested")
                return 2
            report("sanity", outcome, m.name, "failed the suite, as it must")
            shutil.rmtree(work / m.name)

        caught = 0
        for m in chosen:
            copy = fresh_copy(base, work, m)
            outcome = run_suite(copy, within(targets, suites[m.name]), options.suite_timeout)
            caught += outcome.failed
            detail = outcome.first_failure() if outcome.failed else m.why
            report("caught" if outcome.failed else "SURVIVED", outcome, m.name, detail)
            if not options.keep:
                shutil.rmtree(copy)
        minutes, seconds = divmod(round(time.monotonic() - started), 60)
        print(f"total time: {minutes}m{seconds:02d}s")
        print(f"mutation score: {caught}/{len(chosen)}")
        return 0 if caught == len(chosen) else 1
    finally:
        if options.keep:
            print(f"copies kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
