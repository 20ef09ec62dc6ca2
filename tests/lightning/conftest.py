"""fake_checkout/ is material for the runner's test (a Lightning-style tests/ tree, run by
`xlasim lightning` in its own processes), not tests of this session."""

collect_ignore = ["fake_checkout"]
