"""Mutants of the trace files people read: collectives.txt's canonical text, its parse and
`xlasim trace diff`'s first divergence, trace.json's arrows: xlasim/trace_files/."""

from __future__ import annotations

from mutant import mutant

CANONICAL = "xlasim/trace_files/canonical.py"
TRACES_TESTS = ("tests/traces",)

TRACES_MUTANTS = (
    mutant(
        "traces-unfinished-not-said",
        "collectives.txt does not mark a collective the rank never returned from",
        CANONICAL,
        '        status = " | unfinished"',
        '        status = ""',
        TRACES_TESTS,
    ),
    mutant(
        "traces-site-left-out",
        "collectives.txt's lines lose the user's line that called the collective",
        CANONICAL,
        '        f"| at {collective.site}"',
        '        "| at ?"',
        TRACES_TESTS,
    ),
    mutant(
        "traces-diff-ignores-the-site",
        "a branch calling the same collective from another line is no divergence",
        CANONICAL,
        "    for same in (lambda a, b: (a.launch, a.call, a.site) == (b.launch, b.call, b.site), _equal):",
        "    for same in (lambda a, b: (a.launch, a.call) == (b.launch, b.call), _equal):",
        TRACES_TESTS,
    ),
    mutant(
        "traces-diff-reports-the-last-divergence",
        "`xlasim trace diff` names the latest place two runs differ, not the first",
        CANONICAL,
        "            return min(found, key=lambda d: (d.index, d.rank))",
        "            return max(found, key=lambda d: (d.index, d.rank))",
        TRACES_TESTS,
    ),
    mutant(
        "traces-diff-ignores-how-calls-ended",
        "runs that differ only in how a collective ended (raised, unfinished) compare equal",
        CANONICAL,
        "    for same in (lambda a, b: (a.launch, a.call, a.site) == (b.launch, b.call, b.site), _equal):",
        "    for same in (lambda a, b: (a.launch, a.call, a.site) == (b.launch, b.call, b.site),):",
        TRACES_TESTS,
    ),
    mutant(
        "traces-arrow-joins-the-whole-world",
        "trace.json's arrows join collectives recorded without a group too",
        "xlasim/trace_files/timeline.py",
        "            if collective.group:\n                found[collective.key].append(collective)",
        "            if True:\n                found[collective.key].append(collective)",
        TRACES_TESTS,
    ),
)
