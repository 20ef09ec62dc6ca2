"""The catalogue of planted races (fixtures/race_catalogue.py): each found by detection in one
run, made to fail by a schedule within 20, failing again when its seed is replayed; each fixed
twin silent; in both modes. docs/races.md holds the table these tests check."""

import pytest

from fixtures import race_catalogue
from xlasim.base.topology import Topology
from xlasim.races import RaceError, detecting
from xlasim.ranks.world import World


@pytest.fixture(scope="module")
def isolated(world):
    """8 ranks in 8 worker processes (the default mode, as on TPU v4+)."""
    built = World(Topology(8), collective_timeout=30.0)
    yield built
    built.close()


@pytest.mark.parametrize("name", race_catalogue.PROGRAMS)
def test_rank_threads_find_each_race_and_replay_its_failure(world, name):
    row = race_catalogue.measure(world, name, schedules=20, replays=10, plain_runs=0)
    assert row.detected and row.fixed_silent
    assert row.schedules_to_failure is not None, "no schedule of 20 made it fail"
    assert row.replays_failed == row.replays == 10


@pytest.mark.parametrize("name", race_catalogue.PROGRAMS)
def test_worker_processes_find_each_race_and_replay_its_failure(isolated, name):
    row = race_catalogue.measure(isolated, name, schedules=20, replays=2, plain_runs=0)
    assert row.detected and row.fixed_silent
    assert row.schedules_to_failure is not None, "no schedule of 20 made it fail"
    assert row.replays_failed == row.replays == 2


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
