"""The trace files of a known program, in both modes: what they hold, and a reader not ours.

`fixtures/traced_programs.py::known_program` makes four collectives per rank (over the world,
over two groups, a rendezvous), two graph executions and a checkpoint written and read back.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from fixtures import ci, race_catalogue, traced_programs
from xlasim.base.errors import CollectiveTimeoutError
from xlasim.events import model, recorder
from xlasim.races import RaceError, detecting
from xlasim.trace_files import canonical, plot, session, timeline


@pytest.fixture(params=["threads", "isolated"])
def mode_world(request, world):
    return world if request.param == "threads" else request.getfixturevalue("isolated")


def recorded_known_program(record, world, tmp_path) -> Path:
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    return record(world, traced_programs.known_program, (str(checkpoints),), tmp_path / "trace")


def test_collectives_txt_lists_the_program_on_every_rank(record, mode_world, tmp_path):
    directory = recorded_known_program(record, mode_world, tmp_path)
    found = canonical.read(directory)
    assert sorted(found) == [0, 1, 2, 3]
    for rank, entries in found.items():
        calls = [(e.call.split(" #")[0], e.call.split(" in ")[1].split(" |")[0]) for e in entries]
        expected = [(op, str(list(group))) for op, group in traced_programs.KNOWN_COLLECTIVES[rank]]
        assert calls == expected, rank
        assert all("traced_programs.py:" in e.site and e.status == "" for e in entries)


def test_trace_json_names_each_rank_and_holds_every_event(record, mode_world, tmp_path):
    directory = recorded_known_program(record, mode_world, tmp_path)
    events = json.loads((directory / "trace.json").read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    hosts_per_rank = mode_world.topology.cores_per_host
    for rank in range(4):
        assert names[rank].startswith(f"rank {rank} · host {rank // hosts_per_rank} · chip (")
    lanes = {(e["pid"], e["args"]["name"]) for e in events if e["name"] == "thread_name"}
    assert {lane for _, lane in lanes} == {"compute", "collectives", "waits", "checkpoints"}
    slices = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            slices[e["pid"]].append(e)
    for rank in range(4):
        by_category = defaultdict(list)
        for e in sorted(slices[rank], key=lambda e: e["ts"]):
            by_category[e["cat"]].append(e)
        assert [e["name"] for e in by_category["collective"]] == [
            op for op, _ in traced_programs.KNOWN_COLLECTIVES[rank]
        ]
        assert [e["name"] for e in by_category["graph"]] == ["torch_xla.sync", "xm.mark_step"]
        assert [(e["name"], Path(e["args"]["path"]).name) for e in by_category["checkpoint"]] == [
            ("torch.save", f"rank-{rank}.pt"),
            ("torch.load", f"rank-{rank}.pt"),
        ]
        assert len(by_category["launch"]) == 1
        for collective in by_category["collective"]:
            args = collective["args"]
            entered, last, returned = (
                args["entered_us"],
                args["last_member_arrived_us"],
                args["returned_us"],
            )
            assert entered <= last <= returned


def test_trace_json_says_the_same_without_orjson(record, world, tmp_path, monkeypatch):
    """orjson (the `trace` extra) encodes trace.json where it is installed, the standard
    library's json where it is not: the same document either way."""
    ci.need_module("orjson", "trace")
    directory = recorded_known_program(record, world, tmp_path)
    with_orjson = json.loads((directory / "trace.json").read_text())
    monkeypatch.setitem(sys.modules, "orjson", None)  # `import orjson` raises ImportError
    session.write(directory)
    assert json.loads((directory / "trace.json").read_text()) == with_orjson


def test_a_reader_not_ours_finds_every_rank_and_collective(record, world, tmp_path):
    """Holistic Trace Analysis (the PyTorch profiler's trace analyser) parses trace.json."""
    parser = ci.need_module("hta.common.trace_parser", "trace")
    from hta.configs.parser_config import ParserConfig

    directory = recorded_known_program(record, world, tmp_path)
    _, frame, symbols = parser.parse_trace_dataframe(
        str(directory / "trace.json"), ParserConfig.get_default_cfg()
    )
    frame["name"] = frame["name"].map(lambda index: symbols.sym_table[index])
    frame["cat"] = frame["cat"].map(lambda index: symbols.sym_table[index])
    assert sorted(frame["pid"].unique()) == [0, 1, 2, 3]
    for rank in range(4):
        collectives = frame[(frame["pid"] == rank) & (frame["cat"] == "collective")]
        assert list(collectives.sort_values("ts")["name"]) == [
            op for op, _ in traced_programs.KNOWN_COLLECTIVES[rank]
        ]


def test_off_records_nothing(world, tmp_path, monkeypatch):
    monkeypatch.delenv(recorder.TRACE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    world.run(traced_programs.known_program, (str(tmp_path),), size=4)
    assert recorder.current() is None
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"rank-{r}.pt" for r in range(4)]
    assert world.trace is not None and world.trace.files is None


@pytest.fixture
def hanging_world(mode_world):
    """The mode's world with a 2 s collective bound."""
    saved = mode_world.collective_timeout
    mode_world.collective_timeout = 2.0
    yield mode_world
    mode_world.collective_timeout = saved


def test_a_hang_names_its_trace_and_the_picture_shows_the_waiting_ranks(
    record, hanging_world, tmp_path
):
    """In worker processes, the straggler's events reach the trace only if its worker writes
    them out before it is replaced (it sleeps through the end of the run)."""
    directory = tmp_path / "trace"
    with pytest.raises(CollectiveTimeoutError) as raised:
        record(hanging_world, traced_programs.straggler_program, (3, 5.0), directory)
    report = str(raised.value)
    assert f"{directory / 'trace.json'}" in report
    assert f"{directory / 'collectives.txt'}" in report
    assert f"the timeline: {directory / 'timeline.png'}" in report
    assert (directory / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    found = canonical.read(directory)
    assert [e.status for e in found[3]] == [""]  # the straggler met once, then slept
    for rank in range(3):
        assert [e.call.split(" |")[0] for e in found[rank]] == [
            "all_reduce #0 in [0, 1, 2, 3]",
            "all_reduce #1 in [0, 1, 2, 3]",
        ]
        assert found[rank][1].status.startswith("raised")  # released by the timeout
    labels = plot.draw(timeline.load(directory), tmp_path / "again.png")
    waiting = {rank for rank, label in labels if "never met" in label}
    assert waiting == {0, 1, 2}
    assert any(rank == 3 and "still running" in label for rank, label in labels)


def test_an_event_stream_is_in_program_order_on_one_clock(record, isolated, tmp_path):
    directory = recorded_known_program(record, isolated, tmp_path)
    for rank, events in model.read_ranks(directory).items():
        assert [e.n for e in events] == list(range(len(events)))
        assert [e.t for e in events] == sorted(e.t for e in events), rank
        assert all(e.rank == rank for e in events)


def test_a_line_cut_short_by_a_crash_is_left_out(record, world, tmp_path):
    """A process that died mid-write leaves its last line without its newline: the rest of the
    stream, and of the meetings, still reads (the files are decoded whole, not line by line)."""
    directory = recorded_known_program(record, world, tmp_path)
    complete = model.read_ranks(directory)
    meetings = model.read_meetings(directory)
    for name in (model.rank_file(0), model.MEETINGS_FILE):
        with open(directory / model.EVENTS_DIR / name, "a") as stream:
            stream.write('{"rank": 0, "kind": "collec')
    assert model.read_ranks(directory) == complete
    assert model.read_meetings(directory) == meetings
    (directory / model.EVENTS_DIR / model.rank_file(5)).write_text('{"rank": 5, "n"')
    assert sorted(model.read_ranks(directory)) == sorted(complete)


def test_a_race_under_tracing_names_its_trace_and_the_stream_has_the_file_events(
    record, world, tmp_path
):
    """Race detection's file accesses are the stream's file events (docs/events.md)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    directory = tmp_path / "trace"
    with detecting(), pytest.raises(RaceError) as raised:
        record(world, race_catalogue.read_before_write, (str(shared), False), directory)
    assert f"{directory / 'trace.json'}" in str(raised.value)
    files = [
        (rank, e.fields["op"], e.fields["path"])
        for rank, events in model.read_ranks(directory).items()
        for e in events
        if e.kind == model.FILE
    ]
    assert files and all(path.startswith(str(shared)) for _, _, path in files), files
    assert {op for _, op, _ in files} >= {"read", "write"}, files


def test_events_a_racing_flush_wrote_out_of_order_are_read_in_program_order(tmp_path):
    """Two threads acting for one rank (its own and autograd's) can take numbers 5 and 6 and
    append them the other way round, across two flushes: the file then holds 6 before 5."""
    events = tmp_path / model.EVENTS_DIR
    events.mkdir()
    begin = {"rank": 2, "kind": "graph", "ph": "B", "t": 20, "n": 0}
    end = {"rank": 2, "kind": "graph", "ph": "E", "t": 30, "n": 1, "of": 0}
    lines = [end, begin]
    (events / model.rank_file(2)).write_text("".join(json.dumps(line) + "\n" for line in lines))
    [(rank, stream)] = model.read_ranks(tmp_path).items()
    assert rank == 2 and [e.n for e in stream] == [0, 1]
    assert [s.end.n for s in model.spans(stream)] == [1]


def test_only_collectives_of_a_group_are_joined_by_arrows(record, world, tmp_path):
    directory = record(world, traced_programs.send_recv_program, (), tmp_path / "trace")
    ops = [e.call.split(" ")[0] for e in canonical.read(directory)[0]]
    assert ops == ["send", "all_reduce"], ops  # the send is recorded...
    events = json.loads((directory / "trace.json").read_text())["traceEvents"]
    flows = defaultdict(set)
    for event in events:
        if event["ph"] in ("s", "t", "f"):
            flows[event["id"]].add((event["name"], event["pid"]))
    assert sorted(flows.values(), key=sorted) == [{("all_reduce", r) for r in range(4)}]


def test_a_meeting_is_read_back_with_each_members_arrival(tmp_path):
    events = tmp_path / model.EVENTS_DIR
    events.mkdir()
    written = {"group": [0, 1], "arrivals": {"0": 500, "1": 900}}
    (events / model.MEETINGS_FILE).write_text(json.dumps(written) + "\n")
    [meeting] = model.read_meetings(tmp_path)
    assert meeting == model.Meeting((0, 1), {0: 500, 1: 900})
    assert meeting.last_arrival == 900
