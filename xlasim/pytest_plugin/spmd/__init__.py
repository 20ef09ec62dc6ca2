"""SPMD tests: `@pytest.mark.xla(spmd=True)` tests (`marked`) and torch_xla-style SPMD files
(`files`, `files_child`), run in SPMD worker processes (`processes` on pytest's side, `worker`
in the process)."""
