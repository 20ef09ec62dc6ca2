"""The native backend on CPU with one device: the real xmp.spawn, no emulation patches.

This is the code path of a TPU VM (`pytest --xla-backend=native`), exercised where CI runs.
"""


def test_native_one_device(run_inner, monkeypatch) -> None:
    # One CPU device, as CI has (an emulated outer session exported CPU_NUM_DEVICES=8).
    monkeypatch.setenv("CPU_NUM_DEVICES", "1")
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    result, got = run_inner("inner_native.py", "--xla-backend=native")
    assert got == {
        "test_in_a_worker_process": "PASSED",
        "test_sizes[1dev]": "PASSED",
        "test_assert_fails": "FAILED",
        "test_hangs": "FAILED",
        "test_after_the_hang": "PASSED",
    }, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "xlasim: backend native, 1 XLA device (CPU via xmp.spawn, warm worker processes)*",
            "xlasim: hypothesis profile xla-tpu",
            # A worker's failure, rendered there as pytest renders one (asserts rewritten).
            "[[]rank 0/1[]] AssertionError: assert 3 == 4",
            "*- [[]rank 0/1[]] -*",
            ">       assert value == 4",
            "E       assert 3 == 4",
            "test_inner.py:*: AssertionError",
            # A hang: the worker's stack, then a fresh worker for the next test.
            "*CollectiveTimeoutError: the run did not finish within 3 s*killed and are started again*",
            "--- rank 0 (pid *)",
            '*File "*test_inner.py", line * in test_hangs',
            "*Captured stdout call*",
            "[[]rank 0/1[]] worker *",
            "SKIPPED [[]1[]] test_inner.py:*: needs 2 XLA cores, this session has 1*",
            "SKIPPED [[]1[]] test_inner.py:*: not on this chip",
        ]
    )
