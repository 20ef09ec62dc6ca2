"""A mutant: a deliberate fault, as exact old -> new text patches to named files, and the tests
that guard what it breaks. The mutants themselves are listed in mutants.py (the core, the
plugin, the strategy) and in one module per subsystem (tpu_mutants.py, ...)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class MutantDoesNotApply(RuntimeError):
    """The text a mutant replaces is not in its file exactly once: the code moved on."""


@dataclass(frozen=True)
class Edit:
    path: str
    old: str
    new: str


@dataclass(frozen=True)
class Mutant:
    name: str
    why: str
    edits: tuple[Edit, ...]
    #: The tests that guard the code it breaks (paths, as pytest takes them); empty: the run's
    #: default suite (`SUITE` in run.py). A subsystem's mutants run against its own tests only.
    suite: tuple[str, ...] = ()

    def patched(self, root: Path) -> dict[Path, str]:
        """The new text of every file the mutant changes under `root`; raises
        `MutantDoesNotApply` if an old string is not in its file exactly once."""
        texts: dict[Path, str] = {}
        for edit in self.edits:
            file = root / edit.path
            text = texts.get(file) or file.read_text()
            count = text.count(edit.old)
            if count != 1:
                raise MutantDoesNotApply(
                    f"mutant {self.name!r}: {edit.path} contains the text to replace {count} "
                    f"times, expected once:\n{edit.old}"
                )
            texts[file] = text.replace(edit.old, edit.new)
        return texts

    def apply(self, root: Path) -> None:
        """Patch the files under `root` (a copy of the repository, never the working tree)."""
        for file, text in self.patched(root).items():
            file.write_text(text)


def mutant(
    name: str, why: str, path: str, old: str, new: str, suite: tuple[str, ...] = ()
) -> Mutant:
    """A mutant of one edit.

    Args:
        name: its name in the run's report (`--only NAME`).
        why: the fault, as the report states it.
        path: the file it patches, from the repository's root.
        old: the text it replaces, which must occur exactly once in `path`.
        new: what it puts there.
        suite: the tests that guard the code (empty: the run's default suite).
    """
    return Mutant(name, why, (Edit(path, old, new),), suite)
