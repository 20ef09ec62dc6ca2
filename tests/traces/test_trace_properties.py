"""Properties of traces of drawn programs: collectives over drawn replica groups on 4 ranks.

For each drawn program (`fixtures/traced_programs.py`): the canonical text lists exactly the
program's collectives per rank, in order, with their numbers within their groups; the flows of
trace.json join exactly each collective's group; every rank's times only go forward, and
trace.json's are whole nanoseconds (no float noise); and the canonical text is the same on a
second run and in the other mode (worker processes).
"""

from __future__ import annotations

import json
from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fixtures import traced_programs
from xlasim.events import model
from xlasim.trace_files import canonical

WORLD = 4
GROUPINGS = (None, [[0, 1], [2, 3]], [[0, 2], [1, 3]], [[0], [1], [2], [3]], [[0, 1, 2, 3]])


@st.composite
def programs(draw) -> list[traced_programs.Step]:
    steps = draw(
        st.lists(
            st.tuples(st.sampled_from(traced_programs.OPS), st.sampled_from(GROUPINGS)),
            min_size=1,
            max_size=6,
        )
    )
    return [(op, None if op == "rendezvous" else groups) for op, groups in steps]


def _run(record, world, steps, directory):
    return record(world, traced_programs.drawn_program, (WORLD, steps), directory)


def _calls(found: dict[int, list[canonical.Entry]]) -> dict[int, list[tuple]]:
    """(op, group, number in group) per rank, from the canonical text."""
    calls = {}
    for rank, entries in found.items():
        calls[rank] = []
        for entry in entries:
            head = entry.call.split(" |")[0]  # "all_reduce #1 in [0, 1]"
            op, rest = head.split(" #")
            number, group = rest.split(" in ")
            calls[rank].append((op, tuple(json.loads(group)), int(number)))
    return calls


SETTINGS = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@SETTINGS
@given(steps=programs())
def test_the_trace_of_a_drawn_program(record, world, isolated, tmp_path_factory, steps):
    first = _run(record, world, steps, tmp_path_factory.mktemp("first"))
    expected = traced_programs.expected_collectives(WORLD, steps)
    text = (first / canonical.FILE).read_text()
    assert _calls(canonical.parse(text)) == expected

    events = json.loads((first / "trace.json").read_text())["traceEvents"]
    flows = defaultdict(list)
    for event in events:
        if event["ph"] in ("s", "t", "f"):
            flows[event["id"]].append(event["pid"])
    joined = sorted(tuple(sorted(members)) for members in flows.values())
    instances = {(group, number) for calls in expected.values() for _, group, number in calls}
    assert joined == sorted(group for group, _ in instances if len(group) > 1)

    for rank, stream in model.read_ranks(first).items():
        assert [e.t for e in stream] == sorted(e.t for e in stream), rank
    for event in events:
        assert event.get("dur", 0) >= 0
        for key in ("ts", "dur"):  # whole nanoseconds: at most three decimals
            assert round(event.get(key, 0) * 1000) / 1000 == event.get(key, 0), event

    again = _run(record, world, steps, tmp_path_factory.mktemp("again"))
    assert (again / canonical.FILE).read_text() == text
    processes = _run(record, isolated, steps, tmp_path_factory.mktemp("isolated"))
    assert (processes / canonical.FILE).read_text() == text
