"""Mutants of the event stream every trace and race report is made from: xlasim/events/."""

from __future__ import annotations

from mutant import mutant

RECORDER = "xlasim/events/recorder.py"
MODEL = "xlasim/events/model.py"
EVENTS_TESTS = ("tests/traces",)

EVENTS_MUTANTS = (
    mutant(
        "events-group-numbers-shared",
        "a rank numbers its collectives across groups, not within each group (XLA's matching)",
        RECORDER,
        "        number = self._sequences.get(group, 0)\n        self._sequences[group] = number + 1",
        "        number = sum(self._sequences.values())\n        self._sequences[group] = number + 1",
        EVENTS_TESTS,
    ),
    mutant(
        "events-end-forgets-its-begin",
        "an end event does not name the begin it closes",
        RECORDER,
        """    return f',"of":{begin},"error":{json.dumps(error)}' if error else f',"of":{begin}'""",
        """    return f',"error":{json.dumps(error)}' if error else ''""",
        EVENTS_TESTS,
    ),
    mutant(
        "events-error-dropped",
        "an end event forgets what its span raised",
        RECORDER,
        """    return f',"of":{begin},"error":{json.dumps(error)}' if error else f',"of":{begin}'""",
        """    return f',"of":{begin}'""",
        EVENTS_TESTS,
    ),
    mutant(
        "events-read-out-of-program-order",
        "a rank's events are read back in file order, not numbered program order",
        MODEL,
        "            events.sort(key=_number)\n",
        "",
        EVENTS_TESTS,
    ),
    mutant(
        "events-cut-line-kept",
        "the line a crash cut short is decoded with the rest",
        MODEL,
        '    complete = text[: text.rfind("\\n") + 1]',
        '    complete = text if text.endswith("\\n") else text + "\\n"',
        EVENTS_TESTS,
    ),
    mutant(
        "events-meetings-lose-arrivals",
        "a meeting's arrival times are read as 0",
        MODEL,
        '        arrivals = {int(rank): t for rank, t in data["arrivals"].items()}',
        '        arrivals = {int(rank): 0 for rank in data["arrivals"]}',
        EVENTS_TESTS,
    ),
)
