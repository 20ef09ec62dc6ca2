"""Command-line options, ini keys and environment variables, resolved once into `Settings`.

Precedence for each setting: command line, then environment variable, then ini file, then the
default. The resolved settings live on the config's stash so every other module reads the same
answer (and xdist workers, which re-parse the same arguments and environment, agree with it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

DEVICES_ENV = "XLASIM_DEVICES"
BACKEND_ENV = "XLASIM_BACKEND"
TEST_TIMEOUT_ENV = "XLASIM_TEST_TIMEOUT"
#: Cores emulated when nothing says how many: a v4-8 / v5e-8 host's worth.
DEFAULT_DEVICES = 8
#: Bound on one per-rank test or `xla_world.run` call; past it the run fails with every stack.
DEFAULT_TIMEOUT_S = 300.0
BACKENDS = ("auto", "emulated", "native")


@dataclass(frozen=True)
class Settings:
    """What the user asked for. `backend` is still "auto" here; `activation` decides it."""

    devices: int | None
    backend: str
    timeout: float


settings_key = pytest.StashKey[Settings]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("xlasim", "distributed XLA tests on emulated or real TPU cores")
    group.addoption(
        "--xla-devices",
        type=int,
        default=None,
        metavar="N",
        help=f"number of emulated XLA cores (env {DEVICES_ENV}, ini xla_devices; "
        f"default {DEFAULT_DEVICES}). With the native backend: the cores expected.",
    )
    group.addoption(
        "--xla-backend",
        choices=BACKENDS,
        default=None,
        help=f"emulated: rank threads on the XLA CPU device; native: the real xmp.spawn; "
        f"auto (default): native when PJRT_DEVICE=TPU or a TPU is attached (env {BACKEND_ENV}).",
    )
    group.addoption(
        "--xla-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"bound on one per-rank test or xla_world.run call (env {TEST_TIMEOUT_ENV}, "
        f"ini xla_timeout; default {DEFAULT_TIMEOUT_S:g}); @pytest.mark.xla(timeout=...) overrides.",
    )
    parser.addini("xla_devices", "number of emulated XLA cores", default=None)
    parser.addini("xla_backend", "auto, emulated or native", default=None)
    parser.addini("xla_timeout", "seconds a per-rank test may take", default=None)


def _pick(config: pytest.Config, option: str, env: str, ini: str) -> str | None:
    value = getattr(config.known_args_namespace, option, None)
    if value is not None:
        return str(value)
    if os.environ.get(env):
        return os.environ[env]
    return config.getini(ini) or None


def resolve(config: pytest.Config) -> Settings:
    """Read the settings (once per config) and check them, naming where a bad value came from."""
    if settings_key in config.stash:
        return config.stash[settings_key]
    devices = _pick(config, "xla_devices", DEVICES_ENV, "xla_devices")
    backend = _pick(config, "xla_backend", BACKEND_ENV, "xla_backend") or "auto"
    timeout = _pick(config, "xla_timeout", TEST_TIMEOUT_ENV, "xla_timeout")
    try:
        count = None if devices is None else int(devices)
        seconds = DEFAULT_TIMEOUT_S if timeout is None else float(timeout)
    except ValueError as error:
        raise pytest.UsageError(f"xlasim: {error} (from --xla-devices/--xla-timeout)") from None
    if count is not None and count < 1:
        raise pytest.UsageError(f"xlasim: --xla-devices must be at least 1, got {count}")
    if backend not in BACKENDS:
        raise pytest.UsageError(f"xlasim: backend {backend!r} is not one of {', '.join(BACKENDS)}")
    if seconds <= 0:
        raise pytest.UsageError(f"xlasim: --xla-timeout must be positive, got {seconds:g}")
    config.stash[settings_key] = Settings(count, backend, seconds)
    return config.stash[settings_key]
