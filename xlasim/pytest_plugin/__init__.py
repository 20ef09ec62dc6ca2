"""The xlasim pytest plugin: `pytest --xla-devices=N` runs distributed XLA tests on any CPU.

Registered through the `pytest11` entry point. Like pytest's own `_pytest` package, each module
below is a plugin with one concern; this module only lists them so pytest registers them all
when it loads the entry point (before any conftest.py is imported), each before the modules
that import it. Loading them imports neither torch nor torch_xla: the plugin stays dormant
until the session asks for XLA (see `backend_choice`).
"""

pytest_plugins = [
    "xlasim.pytest_plugin.options",
    "xlasim.pytest_plugin.markers",
    "xlasim.pytest_plugin.backend_choice",
    "xlasim.pytest_plugin.timeout_bridge",
    "xlasim.pytest_plugin.fixtures",
    "xlasim.pytest_plugin.ranks",
    "xlasim.pytest_plugin.spmd",
    "xlasim.pytest_plugin.spmd_files",
    "xlasim.pytest_plugin.hypothesis_profiles",
    "xlasim.pytest_plugin.reporting",
    "xlasim.pytest_plugin.metrics",
    "xlasim.pytest_plugin.races",
    "xlasim.pytest_plugin.pods",
    "xlasim.pytest_plugin.debugging",
    "xlasim.pytest_plugin.coverage_combine",
]
