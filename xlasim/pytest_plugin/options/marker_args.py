"""What the plugin's markers accept, and what a checked marker's arguments say.

The check runs at collection (`markers`); the readers (`devices`, `min_devices`, `timeout`)
are for markers that passed it.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

import pytest

#: What each marker accepts, as the usage error states it.
ACCEPTS = {
    "xla": "by keyword: devices=N or devices=[N, ...] (the cores to run on), "
    "min_devices=N (run on every core, skip below N; not with devices), "
    "timeout=SECONDS (bound on the test's runs), "
    "spmd=True (the body runs once, in a process with xr.use_spmd() on over the slice)",
    "xla_min_devices": "N, a whole number >= 1 (or devices=N)",
    "xla_timeout": "SECONDS (or seconds=SECONDS)",
    "xla_metrics": "by keyword: compilations=N, fallbacks=N",
}


def _whole(value: Any, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _seconds(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _sizes(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return bool(value) and all(_whole(n, 1) for n in value)
    return _whole(value, 1)


#: marker -> keyword -> (check, what a good value is).
KEYWORDS: dict[str, dict[str, tuple[Callable[[Any], bool], str]]] = {
    "xla": {
        "devices": (_sizes, "devices must be a positive whole number or a list of them"),
        "min_devices": (lambda n: _whole(n, 1), "min_devices must be a whole number >= 1"),
        "timeout": (_seconds, "timeout must be a positive number of seconds"),
        "spmd": (lambda v: isinstance(v, bool), "spmd must be True or False"),
    },
    "xla_timeout": {"seconds": (_seconds, "seconds must be a positive number")},
    "xla_min_devices": {"devices": (lambda n: _whole(n, 1), "devices must be a whole number >= 1")},
    "xla_metrics": {
        "compilations": (lambda n: _whole(n, 0), "compilations must be a whole number >= 0"),
        "fallbacks": (lambda n: _whole(n, 0), "fallbacks must be a whole number >= 0"),
    },
}


def written(mark: pytest.Mark) -> str:
    """The marker as the user wrote it: `@pytest.mark.xla(device=4)`."""
    arguments = [repr(a) for a in mark.args] + [f"{k}={v!r}" for k, v in mark.kwargs.items()]
    return f"@pytest.mark.{mark.name}({', '.join(arguments)})"


def problems(mark: pytest.Mark) -> list[str]:
    """What is wrong with one of the plugin's markers' arguments (empty when nothing is)."""
    keywords = KEYWORDS[mark.name]
    given = dict(mark.kwargs)
    found = []
    single = {
        "xla_timeout": ("seconds", "one number of seconds"),
        "xla_min_devices": ("devices", "one number of cores"),
    }
    if mark.name in single and mark.args:
        keyword, what = single[mark.name]
        if len(mark.args) > 1 or keyword in given:
            found.append(f"takes {what}")
        given.setdefault(keyword, mark.args[0])
    elif mark.name == "xla_min_devices" and "devices" not in given:
        found.append("takes the least number of cores the test needs: xla_min_devices(N)")
    elif mark.args:
        guesses = " or ".join(f"{name}={mark.args[0]!r}" for name in keywords if name != "spmd")
        found.append(f"arguments are given by keyword ({guesses}?)")
    for name, value in given.items():
        if name not in keywords:
            close = difflib.get_close_matches(name, keywords, n=1)
            found.append(
                f"unknown argument {name!r}" + (f" (did you mean {close[0]}=?)" if close else "")
            )
            continue
        check, what = keywords[name]
        if not check(value):
            found.append(what)
    if mark.name == "xla" and "devices" in given and "min_devices" in given:
        found.append(
            "devices and min_devices exclude each other (devices=N fixes the world's size; "
            "min_devices=N runs on every core of a session of at least N)"
        )
    return found


def devices(mark: pytest.Mark) -> int | list[int] | None:
    """`devices=` of a checked `xla` marker: None (every core), a size, or a list of sizes."""
    value = mark.kwargs.get("devices")
    return list(value) if isinstance(value, (list, tuple)) else value


def min_devices(mark: pytest.Mark) -> int | None:
    """The least number of cores a checked `xla(min_devices=...)` or `xla_min_devices(...)`
    marker asks for, if any."""
    if mark.name == "xla":
        return mark.kwargs.get("min_devices")
    return mark.args[0] if mark.args else mark.kwargs.get("devices")


def timeout(mark: pytest.Mark) -> float | None:
    """The bound a checked `xla(timeout=...)` or `xla_timeout(...)` marker sets, if any."""
    if mark.name == "xla":
        value = mark.kwargs.get("timeout")
    else:
        value = mark.args[0] if mark.args else mark.kwargs.get("seconds")
    return None if value is None else float(value)


def checked(mark: pytest.Mark | None) -> bool:
    """Whether a marker may be used (collection stops on bad ones; this is for hooks that run
    while a test is still being collected, such as `pytest_generate_tests`)."""
    return mark is not None and not problems(mark)
