"""Repository-wide test configuration."""

# The plugin's own tests drive inner pytest sessions; pytest only honours this at the top level.
pytest_plugins = ["pytester"]
