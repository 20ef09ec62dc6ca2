"""The catalogue of planted races (fixtures/race_catalogue.py), in both modes: each passes 10 of
10 runs without a schedule, is found by detection in one run, fails under exploration with its
planted exception within the schedules docs/races.md's table gives, and replays that failure 20
of 20 times with the same interleaving, quietly and beside two CPU hogs; each fixed twin is
silent. docs/races.md holds the table these tests check."""

import re
from pathlib import Path

import pytest

from fixtures import race_catalogue
from xlasim.base.topology import Topology
from xlasim.races import RaceError, detecting
from xlasim.ranks.world import World

DOCS = Path(__file__).resolve().parents[2] / "docs" / "races.md"


@pytest.fixture(scope="module")
def isolated(world):
    """8 ranks in 8 worker processes (the default mode, as on TPU v4+)."""
    built = World(Topology(8), collective_timeout=30.0)
    yield built
    built.close()


@pytest.fixture(params=["threads", "processes"])
def either(request, world, isolated):
    return world if request.param == "threads" else isolated


@pytest.mark.parametrize("name", race_catalogue.PROGRAMS)
def test_each_planted_race_passes_plainly_fails_as_planted_and_replays(either, name):
    row = race_catalogue.measure(either, name)
    assert row.plain_passed == row.plain_runs == 10
    assert row.detected and row.fixed_silent
    assert row.schedules_to_failure is not None, "no schedule of 20 made it fail"
    assert row.schedules_to_failure <= race_catalogue.SCHEDULES_TO_FAILURE[name]
    assert row.failed_as_planted, f"failed, but not with {race_catalogue.PLANTED[name]}"
    assert row.replays_same == row.loaded_replays_same == row.replays == 20


def test_the_docs_table_gives_the_schedules_to_failure_the_tests_hold():
    rows = re.findall(r"^\| `(\w+)` \|(?:[^|]*\|){3} (\d+) \|", DOCS.read_text(), re.M)
    assert rows and set(rows) == {
        (name, str(n)) for name, n in race_catalogue.SCHEDULES_TO_FAILURE.items()
    }


def test_every_rank_ensuring_its_directory_is_not_reported(world):
    with detecting():
        assert (
            race_catalogue.launch(world, race_catalogue.every_rank_ensures_its_directory, False)
            is None
        )


def test_the_report_names_both_ranks_operations_and_lines(world):
    with detecting():
        error = race_catalogue.launch(world, race_catalogue.consolidate_before_shards, False)
    assert isinstance(error, RaceError)
    text = str(error)
    assert "rank 0 (host 0): list" in text and "rank 1 (host 0): write" in text
    assert "race_catalogue.py" in text and "in consolidate_before_shards" in text
    assert "between rank 0 and ranks 1-7 (7 pairs)" in text


def test_a_file_missing_on_another_host_names_the_host_that_wrote_it(world, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # host 0 works in the launching directory
    pod = World(Topology(4, processes=2, hosts=2), collective_timeout=30.0)
    try:
        with detecting(), pytest.raises(FileNotFoundError) as caught:
            pod.run(race_catalogue.load_what_host_zero_saved)
    finally:
        pod.close()
    text = str(caught.value)
    assert (
        "rank 2/4 raised FileNotFoundError" in text
        and "rank 0 wrote checkpoint.pt on host 0" in text
    )
    assert "race_catalogue.py:" in text and "rank 2 runs on host 1" in text


def test_without_detection_nothing_is_recorded(world, tmp_path):
    outcomes = world.run_outcomes(
        race_catalogue.every_rank_ensures_its_directory, (str(tmp_path), False)
    )
    assert [o.accesses for o in outcomes] == [None] * world.size
    with detecting():
        outcomes = world.run_outcomes(
            race_catalogue.every_rank_ensures_its_directory, (str(tmp_path), False)
        )
    assert all(any(a.op == "makedirs(exist_ok=True)" for a in o.accesses) for o in outcomes)
