"""`pytest --xla-trace=DIR`: a trace per test, the same text emulated and natively.

The same inner file runs on one emulated core and on the native backend with one CPU device
(the real xmp.spawn and torch_xla's own collectives, as on a TPU VM): the events come from the
same wrappers over different implementations, and the canonical texts must be equal. One test
hangs after a collective: natively its worker is killed, and the trace still holds what it did
(the worker writes its events out on the flush signal first).
"""

from pathlib import Path


def test_emulated_and_native_traces_agree(run_inner, pytester, monkeypatch) -> None:
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    monkeypatch.setenv("CPU_NUM_DEVICES", "1")
    traces = {}
    for backend in ("emulated", "native"):
        root = Path(pytester.path) / f"traces-{backend}"
        result, got = run_inner(
            "inner_traced.py", f"--xla-backend={backend}", "--xla-devices=1", f"--xla-trace={root}"
        )
        assert got == {
            "test_program": "PASSED",
            "test_fails": "FAILED",
            "test_hangs": "FAILED",
        }, result.stdout.str()
        # The failing test's report names its files.
        result.stdout.fnmatch_lines(
            [
                "*Captured xlasim trace call*",
                f"the trace up to the failure: {root}/test_inner.py_test_fails/trace.json *",
            ]
        )
        traces[backend] = {
            test: (root / f"test_inner.py_{test}" / "collectives.txt").read_text()
            for test in ("test_program", "test_fails", "test_hangs")
        }
    assert traces["emulated"] == traces["native"]
    hung = traces["native"]["test_hangs"].splitlines()
    assert [line.split(" | ")[1].split(" #")[0] for line in hung[2:]] == ["all_reduce"], hung
    program = traces["native"]["test_program"].splitlines()
    assert [line.split(" | ")[1].split(" #")[0] for line in program[2:]] == [
        "all_reduce",
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "mesh_reduce",
        "rendezvous",
    ]
    assert program[3].startswith("  #1 launch 0 | all_reduce #1 in [0] | reduce_type='max'")
