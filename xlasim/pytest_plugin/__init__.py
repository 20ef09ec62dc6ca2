"""The xlasim pytest plugin: `pytest --xla-devices=N` runs distributed XLA tests on any CPU.

Registered through the `pytest11` entry point. Like pytest's own `_pytest` package, each module
below is a plugin with one concern; this module only lists them so pytest registers them all
when it loads the entry point (before any conftest.py is imported).
"""

pytest_plugins = [
    "xlasim.pytest_plugin.options",
    "xlasim.pytest_plugin.markers",
    "xlasim.pytest_plugin.activation",
    "xlasim.pytest_plugin.fixtures",
    "xlasim.pytest_plugin.ranks",
    "xlasim.pytest_plugin.reporting",
    "xlasim.pytest_plugin.hypothesis_profiles",
    "xlasim.pytest_plugin.metrics",
]
