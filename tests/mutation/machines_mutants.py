"""Mutants of the pod across machines (xlasim/pods/): rank results exchanged between
machines, a lost machine's detection and failure notices, the token's proofs and the keys only
members name, and the lengths a peer declares. Their suite is the fast machine tests (a pod of
2 machines on loopback, the wire and results formats); the namespace tests show the same across
machines (`-m slow`)."""

from __future__ import annotations

from mutant import mutant

LINK = "xlasim/pods/link.py"
MACHINES_TESTS = (
    "tests/pods/test_pod_link.py",
    "tests/pods/test_wire.py",
    "tests/pods/test_results.py",
)

MACHINES_MUTANTS = (
    mutant(
        "machines-results-tuple-as-list",
        "a rank's tuple result arrives on the other machine as a list",
        "xlasim/pods/results.py",
        '            return items if kind == "list" else tuple(items)',
        "            return items",
        MACHINES_TESTS,
    ),
    mutant(
        "machines-results-leftover-accepted",
        "bytes left over after another machine's rank results are ignored, not an error",
        "xlasim/pods/results.py",
        "        if reader.offset != len(message):",
        "        if False:",
        MACHINES_TESTS,
    ),
    mutant(
        "machines-exchange-answers-itself",
        "an exchange hands back this machine's own message as the peer's",
        LINK,
        "            received[peer] = raw.numpy().tobytes()",
        "            received[peer] = message",
        MACHINES_TESTS,
    ),
    mutant(
        "machines-silent-machine-not-named",
        "a machine that never answers is not named at the collective bound (gloo's later "
        "timeout reports it as a lost link instead)",
        LINK,
        "            if time.monotonic() > deadline:\n                silent: int",
        "            if False:\n                silent: int",
        MACHINES_TESTS,
    ),
    mutant(
        "machines-failure-notices-not-read",
        "another machine's failure notice is never read: its ranks' failure goes unnamed",
        LINK,
        "                if self._store.check([key]):",
        "                if False:",
        MACHINES_TESTS,
    ),
    mutant(
        "machines-keys-without-the-token",
        "the pod's keys are named from the challenge alone: any host that reads it acts on them",
        "xlasim/pods/keys.py",
        "        return cls(f\"pod/{proof(token, challenge, 'keys')}\")",
        "        return cls(f\"pod/{proof('', challenge, 'keys')}\")",
        MACHINES_TESTS,
    ),
    mutant(
        "machines-any-proof-seated",
        "machine 0 seats a joiner whatever proof of the token it shows",
        "xlasim/pods/join.py",
        '    if not hmac.compare_digest(shown, proof(settings.token, challenge, f"{ticket}:{rank}")):',
        "    if False:",
        MACHINES_TESTS,
    ),
    mutant(
        "machines-declared-length-unchecked",
        "a peer's declared message length is allocated without a check",
        LINK,
        "        if not 0 <= declared <= limit:",
        "        if False:",
        MACHINES_TESTS,
    ),
    mutant(
        "machines-wire-negative-length",
        "a negative buffer length in a collective's message walks the offset back",
        "xlasim/pods/wire.py",
        "    if not isinstance(count, int) or isinstance(count, bool) or count < 0:",
        "    if not isinstance(count, int) or isinstance(count, bool):",
        MACHINES_TESTS,
    ),
)
