"""The xlasim pytest plugin: `pytest --xla-devices=N` runs distributed XLA tests on any CPU.

Registered through the `pytest11` entry point. Like pytest's own `_pytest` package, each module
below is a plugin with one concern; this module only lists them so pytest registers them all
when it loads the entry point (before any conftest.py is imported), each before the modules
that import it. Loading them imports neither torch nor torch_xla: the plugin stays dormant
until the session asks for XLA (see `backends/choice`). The modules sit in subfolders by concern
(`backends/`, `per_rank/`, `spmd/`, `remote/`, `options/`, `reporting/`: docs/architecture.md).
"""

pytest_plugins = [
    "xlasim.pytest_plugin.options.command_line",
    "xlasim.pytest_plugin.options.markers",
    "xlasim.pytest_plugin.backends.choice",
    "xlasim.pytest_plugin.options.timeout_bridge",
    "xlasim.pytest_plugin.per_rank.fixtures",
    "xlasim.pytest_plugin.per_rank.calls",
    "xlasim.pytest_plugin.spmd.marked",
    "xlasim.pytest_plugin.spmd.files",
    "xlasim.pytest_plugin.options.hypothesis_profiles",
    "xlasim.pytest_plugin.reporting.terminal",
    "xlasim.pytest_plugin.reporting.metrics",
    "xlasim.pytest_plugin.options.races",
    "xlasim.pytest_plugin.remote.pod_session",
    "xlasim.pytest_plugin.per_rank.debugging",
    "xlasim.pytest_plugin.reporting.coverage_combine",
]
