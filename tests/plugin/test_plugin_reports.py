"""Reports of failing ranks: ranks that fail alike share one section; different failures keep
their own; a run whose function never started because of the rank-argument convention says
which convention the call uses.

One inner session (inner_reports.py) with rank threads and one with worker processes.
"""

import pytest

EXPECTED = {
    "test_all_ranks_fail_alike": "FAILED",
    "test_two_ways": "FAILED",
    "test_world_run_convention": "FAILED",
    "test_core_run_convention": "FAILED",
    "test_type_error_inside": "FAILED",
}
WORLD_RUN_HINT = (
    "xlasim: xla_world.run(fn, *args) calls fn(*args) on every rank, with no rank argument "
    "(as torch_xla's pjrt.run_multiprocess does)*"
)
CORE_RUN_HINT = (
    "xlasim: xmp.spawn(fn, args) and xlasim.world().run(fn, args) call fn(rank, *args) on "
    "every rank*"
)


@pytest.mark.parametrize(
    "topology",
    [("--xla-processes=1",), ("--xla-processes=2",)],
    ids=["threads", "processes"],
)
def test_failures_grouped(run_inner, topology) -> None:
    result, got = run_inner("inner_reports.py", "--xla-devices=4", *topology)
    assert {name: got.get(name) for name in EXPECTED} == EXPECTED, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            # Every rank failed the same way: one section naming them all, and one copy of
            # the output they share.
            "*_ test_all_ranks_fail_alike _*",
            "[[]ranks 0-3 of 4[]] AssertionError: every rank sees 4",
            "*- [[]ranks 0-3 of 4[]] -*",
            '>       assert xla_rank.world_size == 3, "every rank sees 4"',
            "E       AssertionError: every rank sees 4",
            "*- [[]ranks 0-3 of 4[]] captured stdout -*",
            "every rank prints this",
            # Two different failures: a section each.
            "*_ test_two_ways _*",
            "[[]ranks 0, 2 of 4[]] KeyError: 'even ranks' (and ranks 1, 3)",
            "*- [[]ranks 0, 2 of 4[]] -*",
            "*- [[]ranks 1, 3 of 4[]] -*",
            # The function never ran: the hint names the convention of the call.
            "*_ test_world_run_convention _*",
            "[[]ranks 0-3 of 4[]] TypeError: rank_argument() missing 1 required positional "
            "argument: 'rank'",
            WORLD_RUN_HINT,
            "*- [[]ranks 0-3 of 4[]] -*",
            "*_ test_core_run_convention _*",
            CORE_RUN_HINT,
            "*_ test_type_error_inside _*",
        ]
    )
    output = result.stdout.str()
    for rank in range(4):
        assert f"[rank {rank}/4] -" not in output, output  # no per-rank copies
    inside = output[output.index("_ test_type_error_inside _") :]
    assert "xlasim: xla_world.run(fn, *args)" not in inside  # fn ran: no hint
