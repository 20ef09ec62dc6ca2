"""The plugin on the emulated backend: one inner session (inner_emulated.py) and its report.

One fresh process runs every inner test (the device count is fixed once torch_xla's runtime
starts, and each run costs a torch_xla import), then the checks below read its report.
"""


def test_emulated_session(run_inner) -> None:
    # The threads mode: test_plugin_processes.py covers ranks in processes of their own.
    result, got = run_inner("inner_emulated.py", "--xla-devices=8", "--xla-processes=1")
    expected = {
        "test_all_ranks_pass": "PASSED",
        "test_parametrize_on_sub_world[2]": "PASSED",
        "test_parametrize_on_sub_world[3]": "PASSED",
        "test_sizes[1dev]": "PASSED",
        "test_sizes[2dev]": "PASSED",
        "test_rank_3_fails": "FAILED",
        "test_one_rank_skips": "FAILED",
        "test_xfail_on_a_rank": "XFAIL",
        "test_hangs": "FAILED",
        "test_after_the_hang": "PASSED",
        "test_rank_needs_marker": "ERROR",
        "test_given_on_ranks": "ERROR",
        "test_hypothesis_through_world": "PASSED",
        "test_world_run_failure": "FAILED",
        "test_recompiling_loop": "FAILED",
        "test_steady_loop": "PASSED",
        "test_fallbacks_counted": "FAILED",
    }
    assert {name: got.get(name) for name in expected} == expected, result.stdout.str()
    # Skips: a size the session lacks, and a skip taken by every rank, are plain skips.
    result.stdout.fnmatch_lines(
        [
            "xlasim: backend emulated, 8 XLA devices (*), test timeout 300 s, torch 2.9.0, torch_xla 2.9.0",
            "SKIPPED [[]1[]] test_inner.py:*: needs 16 XLA cores, this session has 8*",
            "SKIPPED [[]1[]] test_inner.py:*: not on this slice",
        ],
    )
    # Report sections, in report order. A fixture only marked tests may use:
    result.stdout.fnmatch_lines(["*asks for xla_rank but is not marked @pytest.mark.xla*"])
    # The failing rank has its own section: traceback cut to the test, and its output;
    # the other ranks' output is tagged in pytest's usual capture.
    result.stdout.fnmatch_lines(
        [
            "*_ test_rank_3_fails _*",
            "[[]rank 3/4[]] AssertionError: rank three is broken",
            "*- [[]rank 3/4[]] -*",
            '>       assert xla_rank.rank != 3, "rank three is broken"',
            "E       AssertionError: rank three is broken",
            "*- [[]rank 3/4[]] captured stdout -*",
            "rank 3 says hello",
            "*- Captured stdout call -*",
            "[[]rank 0/4[]] rank 0 says hello",
            # A skip on one rank only is no outcome: the report says who did what.
            "*_ test_one_rank_skips _*",
            "*InconsistentOutcomeError: ranks disagree*",
            "  rank 0: skipped (only rank 0 leaves)",
            "  rank 1: released from a collective wait*",
            # A hang: where every rank was (then test_after_the_hang passed, above).
            "*_ test_hangs _*",
            "*CollectiveTimeoutError: the run did not finish within 2 s*",
            "--- rank 1 never arrived; it is running at test_inner.py:* in test_hangs",
            "*threading.Event().wait()*",
            "--- rank 0 waits in all_reduce*",
            # xla_world.run names the failing rank too.
            "*_ test_world_run_failure _*",
            "[[]rank 5/8[]] AssertionError*",
            # The performance lint: a recompiling loop and a CPU fallback.
            "*_ test_recompiling_loop _*",
            "*@pytest.mark.xla_metrics: XLA performance bound exceeded: 3 graphs compiled, bound 1*",
            "*_ test_fallbacks_counted _*",
            "*2 CPU fallbacks (aten::nonzero x2), bound 0*",
        ]
    )
    assert "[rank 0/4] -" not in result.stdout.str()  # passing ranks get no failure section
    # @given on a per-rank test: xlasim's refusal, not Hypothesis' complaint about the
    # function-scoped xla_rank fixture that the refusal makes moot.
    result.stdout.fnmatch_lines(
        [
            "*_ ERROR at setup of test_given_on_ranks _*",
            "*@pytest.mark.xla cannot be combined with Hypothesis' @given*",
        ]
    )
    assert "function-scoped fixture" not in result.stdout.str()
