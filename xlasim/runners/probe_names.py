"""The names the probe plugin (`pytest_probe`) and the runners share: the junit properties it
writes and the variable naming its progress file. Apart from the plugin because the plugin
imports pytest, and the `xlasim` command (which imports the runners) must work where pytest is
not installed (`pip install xlasim`, then `xlasim run`)."""

LAUNCHES = "xlasim_launches"
COLLECTIVES = "xlasim_collectives"
PROGRESS_ENV = "XLASIM_CONFORMANCE_PROGRESS"
