"""Compilation on emulated cores: what ranks can share, and when (docs/compilation.md)."""
