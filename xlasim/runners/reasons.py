"""Reading a run's output for what went wrong: the first error line, where a bare assert
failed, a crash's signal and fatal log line, a missing package, unittest's verdict.

Heuristics over text, kept apart from the decisions in `classify` so each can be tested on
outputs written by hand.
"""

from __future__ import annotations

import functools
import re
import signal
import subprocess
import sys
from pathlib import Path

#: Modules a test may need that are part of the stack under test: missing, they are a broken
#: install, not an optional package.
_STACK = frozenset({"torch", "torch_xla", "xlasim"})


def compact(error: str) -> str:
    """xlasim's rank failures, shorter: `RankFailedError[X]: ranks 0-7 of 8 raised X: ...`."""
    error = re.sub(r"\bxlasim\.(?:\w+\.)*(?=\w+Error)", "", error)

    def span(match: re.Match[str]) -> str:
        ranks = [int(r) for r in match.group(1).split(", ")]
        contiguous = ranks == list(range(ranks[0], ranks[-1] + 1))
        return f"ranks {ranks[0]}-{ranks[-1]}" if contiguous else match.group(0)

    return re.sub(r"ranks (\d+(?:, \d+){2,})", span, error)


def assertion_site(text: str) -> str | None:
    """Where the first bare `assert` failed, as `file.py:LINE: code`: torch_xla's tests mostly
    assert without a message, and "AssertionError" alone says nothing. Reads Python tracebacks,
    also as pytest quotes them (lines prefixed `E `)."""
    lines = [re.sub(r"^E {0,11}", "", line) for line in text.splitlines()]
    for i, line in enumerate(lines):
        if re.fullmatch(r"\s*AssertionError:?\s*", line):
            frames = [j for j in range(i) if _FRAME.match(lines[j])]
            if frames:
                where = _FRAME.match(lines[frames[-1]])
                code = lines[frames[-1] + 1].strip() if frames[-1] + 1 < i else ""
                return f"{Path(where.group(1)).name}:{where.group(2)}: {code}".rstrip(": ")
    return None


_FRAME = re.compile(r'\s*File "([^"]+)", line (\d+), in ')


_NO_MODULE = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")


def missing_package(text: str, root: Path) -> str | None:
    """The top-level package a ModuleNotFoundError names, unless it is part of the stack under
    test or of the test tree itself (its modules, or the tree as a package, `test.pjrt...`):
    then the test's import path is wrong, a real failure.

    Args:
        text: the failure's output, searched for `ModuleNotFoundError: No module named`.
        root: the directory of the test tree the test was run from; a module found in it is
            the tree's own, not a missing package.
    """
    for name in _NO_MODULE.findall(text):
        top = name.split(".")[0]
        own = top == root.name or (root / f"{top}.py").exists() or (root / top).is_dir()
        if top not in _STACK and not own:
            return top
    if _JAX_FEATURE in text:
        return jax_feature_blocker()
    return None


#: torch_xla's own error when `torchax` or `jax` cannot be imported (its `maybe_get_torchax`,
#: `maybe_get_jax` return None): the import error itself is swallowed.
_JAX_FEATURE = "AssertionError: Jax is required for this feature"
#: The modules torch_xla's JAX features import, in order (torchax imports jax).
_JAX_FEATURE_MODULES = ("jax", "torchax")


@functools.cache
def jax_feature_blocker() -> str:
    """The package whose absence stops torch_xla's JAX features: `jax`, `torchax`, or what one
    of them imports and cannot find (torchax 0.0.x imports `flax`, which torch_xla's `pallas`
    extra does not install), found by importing them in a fresh interpreter of this
    environment (so the runner does not load JAX itself). Cached: one answer per run."""
    for module in _JAX_FEATURE_MODULES:
        done = subprocess.run(
            [sys.executable, "-c", f"import {module}"],
            capture_output=True,
            text=True,
            timeout=_IMPORT_BOUND_S,
        )
        missing = _NO_MODULE.findall(done.stderr)
        if missing:
            return missing[-1].split(".")[0]
    return _JAX_FEATURE_MODULES[-1]  # importable now: it failed in the test's environment


#: How long importing JAX may take in the fresh interpreter (seconds; it takes ~5 unloaded).
_IMPORT_BOUND_S = 300


def crash_reason(status: int | None, text: str) -> str | None:
    """Why the process died rather than exited: a signal, or a fatal error XLA or Python
    reported (an `F` log line, such as a failed CHECK, or "Fatal Python error").

    Args:
        status: the process's exit status; negative: the signal that killed it (subprocess's
            convention); None (killed at the timeout): only a fatal line counts.
        text: the process's combined output, searched for a fatal line.
    """
    fatal = _FATAL_LOG.search(text) or re.search(r"(Fatal Python error: .*)$", text, re.M)
    if status is not None and status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"killed by {name}" + (f": {fatal.group(1).strip()}" if fatal else "")
    return fatal.group(1).strip() if fatal else None


def first_error_line(text: str) -> str | None:
    """The line that best says what went wrong: xlasim's own report, else the first failing
    unittest and its exception, else the first traceback's exception, else an absl/glog error."""
    lines = text.splitlines()
    for line in lines:
        if line.startswith("xlasim: "):
            return line[len("xlasim: ") :]
    test = next((m.group(1) for m in map(_UNITTEST_FAILURE.match, lines) if m), None)
    exception = _first_exception(lines)
    if exception:
        return f"{test}: {exception}" if test else exception
    return next((m.group(1) for m in map(_error_log, lines) if m), None)


_UNITTEST_FAILURE = re.compile(r"^(?:FAIL|ERROR): (\S+)")


def _log_line(level: str) -> re.Pattern[str]:
    """absl/glog lines of one level, in both prefixes seen: `E1123 18:19:00.5 123 file.cc:10] msg`
    (absl) and `2026-11-23 18:19:00.5: E external/xla/file.cc:10] msg` (XLA's tsl logging)."""
    return re.compile(
        rf"^(?:{level}\d{{4}} [\d:.]+\s+\d+ |\d{{4}}-\d\d-\d\d [\d:.]+: {level} )\S+\] (.*)$", re.M
    )


_FATAL_LOG = _log_line("F")
_ERROR_LOGS = (_log_line("E"), re.compile(r"^ERROR:[\w.]+:(.*)$"))  # and Python logging's


def _error_log(line: str) -> re.Match[str] | None:
    return next((m for m in (p.match(line) for p in _ERROR_LOGS) if m), None)


def _first_exception(lines: list[str]) -> str | None:
    for i, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last):"):
            for after in lines[i + 1 :]:
                if after and not after[0].isspace():
                    return after.strip()
    return None


#: unittest's "Ran N tests in T" and the verdict under it. Ranks writing to one stream (a
#: torchrun file: every rank runs unittest) may put other lines between the two.
_UNITTEST_VERDICT = re.compile(
    r"^Ran (\d+) tests? in .*$(?:\n(?!Ran \d).*)*?\n((?:OK|FAILED)\b.*)$", re.M
)


def unittest_summary(text: str) -> str:
    """unittest's verdict ("ran 4 tests: FAILED (failures=3)"), as a suffix for a reason (empty
    when the output has none)."""
    found = _UNITTEST_VERDICT.findall(text)
    if not found:
        return ""
    ran, verdict = found[-1]
    return f"; ran {ran} tests: {verdict.strip()}"


def last_line(text: str) -> str:
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")


def line_of(text: str, offset: int) -> str:
    """The whole line of `text` that holds a match found at `offset`, stripped: quotes in a
    reason what a run printed around the match (such as a skip notice).

    Args:
        text: a run's output.
        offset: a character index into `text` (a regex match's start).
    """
    start = text.rfind("\n", 0, offset) + 1
    end = text.find("\n", offset)
    return text[start : end if end >= 0 else len(text)].strip()
