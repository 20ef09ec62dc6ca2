"""Fixtures made on each rank: pytest's capture, log, warning and monkeypatch fixtures, and the
user's own `@xlasim.rank_fixture` fixtures, in a `@pytest.mark.xla` test.

Fixture values are resolved once, in the pytest process, and handed to every rank (pickled to
ranks in other processes). Some values only make sense where the rank runs: what a rank printed
or logged, the warnings it raised, the modules it patched. For those the rank gets a stand-in
(`OnRank`) that it makes into its own value before the test body runs and tears down after it:

- pytest's own `capsys`, `capsysbinary`, `capfd`, `capfdbinary`, `caplog`, `recwarn` and
  `monkeypatch` (`rank_builtins.py`). pytest still sets its own up in the pytest process (a
  fixture of the pytest process that uses `monkeypatch` keeps working there); the rank gets its
  own of the same name.
- a fixture decorated `@xlasim.rank_fixture`: in a marked test its function runs on every rank
  (never in the pytest process), with its arguments resolved as for any fixture (pytest's in
  the pytest process, rank fixtures and `xla_rank` on the rank); in an unmarked test it is an
  ordinary fixture.

`for_ranks` (pytest process) puts the stand-ins in; `made` (on the rank) makes them, each once
per rank and test, and tears them down in reverse order after the body, as pytest would.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import os
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from . import rank_builtins
from .handles import RankPlaceholder, XlaRank

_tests = itertools.count()


@dataclass(frozen=True)
class OnRank:
    """A fixture value each rank makes for itself: `make` names a module-level function (a
    rank builtin's, or the user's rank fixture), called on the rank with `arguments` (their
    own stand-ins made first); a generator is a fixture with teardown."""

    name: str
    make: Callable[..., Any]
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__") or "name" not in self.__dict__:  # pickle's look-ups
            raise AttributeError(attribute)
        raise AttributeError(
            f"fixture {self.name!r}.{attribute} was read in the pytest process: in a "
            "@pytest.mark.xla test it is made on each rank, so only the test body (and other "
            "rank fixtures) see its value"
        )


def rank_fixture(
    function: Callable[..., Any] | None = None, *, name: str | None = None, autouse: bool = False
) -> Any:
    """`@pytest.fixture` made on each rank of a `@pytest.mark.xla` test.

    In a marked test the function runs on every rank, in the rank's thread or process, before
    the body (and after it, past a `yield`); its arguments are fixtures as usual: those made on
    ranks (`xla_rank`, `capsys`, other rank fixtures) are the rank's own, the others are
    resolved in the pytest process and handed to every rank. In an unmarked test it is an
    ordinary fixture of the pytest process. Function scope only; the function must be
    module-level (ranks in worker processes find it by reference, as xmp.spawn's functions).

    Args:
        function: the fixture function (when used without parentheses).
        name: the fixture's name (default: the function's).
        autouse: as pytest's `autouse`: made for every test that can see it.
    """

    def decorate(made: Callable[..., Any]) -> Any:
        signature = inspect.signature(made)
        if "request" in signature.parameters:
            raise TypeError(
                f"rank fixture {made.__qualname__} takes `request`: a rank fixture runs on the "
                "ranks, where there is no pytest request; take what it needs from another fixture"
            )
        generator = inspect.isgeneratorfunction(made)

        @functools.wraps(made)
        def in_pytest_process(request: pytest.FixtureRequest, **arguments: Any) -> Any:
            if runs_on_ranks(request.node):
                yield OnRank(name or made.__name__, made, arguments)
            elif generator:
                yield from made(**arguments)
            else:
                yield made(**arguments)

        request = inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        in_pytest_process.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[request, *signature.parameters.values()]
        )
        del in_pytest_process.__wrapped__  # pytest reads the signature above, not the function's
        _findable(made)
        return pytest.fixture(in_pytest_process, name=name or made.__name__, autouse=autouse)

    return decorate if function is None else decorate(function)


def _findable(function: Callable[..., Any]) -> None:
    """Keep the function reachable by reference in its module (pytest replaces the module's
    name with the fixture), under a name of its own: ranks in worker processes unpickle it."""
    if "<locals>" in function.__qualname__ or "." in function.__qualname__:
        raise TypeError(
            f"rank fixture {function.__qualname__} must be a module-level function (ranks in "
            "worker processes find it by reference)"
        )
    alias = f"_xlasim_rank_fixture_{function.__name__}"
    function.__globals__[alias] = function
    function.__qualname__ = alias


def runs_on_ranks(item: pytest.Item) -> bool:
    """Whether the test's body runs on every rank (marked `xla`, not an SPMD test)."""
    marker = item.get_closest_marker("xla")
    return marker is not None and not marker.kwargs.get("spmd")


def for_ranks(
    item: pytest.Item, funcargs: Mapping[str, Any], argnames: Sequence[str]
) -> tuple[dict[str, Any], list[OnRank]]:
    """What the ranks get of a marked test's fixtures: its arguments, pytest's builtins among
    them as the ranks' own (stand-ins), and the rank fixtures the test does not take but pytest
    set up for it (autouse, or wanted by another fixture), to make on every rank too.

    Args:
        item: the marked test.
        funcargs: every fixture value pytest set up for it, by name (`item.funcargs`).
        argnames: the names the test function takes, in its signature's order.
    """
    test = f"{os.getpid()}-{next(_tests)}"  # what the test's ranks share in a process

    def for_rank(name: str, value: Any) -> Any:
        if isinstance(value, OnRank):
            arguments = {n: for_rank(n, v) for n, v in value.arguments.items()}
            return OnRank(value.name, value.make, arguments)
        builtin = rank_builtins.stand_in(item, test, name, value)
        return value if builtin is None else OnRank(name, *builtin)

    arguments = {name: for_rank(name, funcargs[name]) for name in argnames}
    others = [
        for_rank(name, value)
        for name, value in funcargs.items()
        if name not in argnames and isinstance(value, OnRank)
    ]
    return arguments, others


@contextmanager
def made(arguments: Mapping[str, Any], others: Sequence[OnRank] = ()) -> Iterator[dict[str, Any]]:
    """On a rank: the test's arguments with every stand-in made into the rank's own value (each
    fixture once), torn down in reverse order when the body is done. A teardown that raises
    fails the rank; after a body that raised, it is added to that error as a note.

    Args:
        arguments: the test's arguments as `for_ranks` gave them: values, stand-ins (`OnRank`)
            and the `xla_rank` placeholder.
        others: stand-ins of rank fixtures the test does not take, made (and torn down) too.
    """
    rank_view: list[XlaRank] = []
    values: dict[str, Any] = {}
    teardowns: list[tuple[str, Generator[Any, None, None]]] = []

    def make(name: str, value: Any) -> Any:
        if isinstance(value, RankPlaceholder):
            rank_view[:] = rank_view or [XlaRank.current()]
            return rank_view[0]
        if not isinstance(value, OnRank):
            return value
        if value.name not in values:
            arguments = {n: make(n, v) for n, v in value.arguments.items()}
            result = value.make(**arguments)
            if inspect.isgenerator(result):
                teardowns.append((value.name, result))
                result = next(result)
            values[value.name] = result
        return values[value.name]

    try:
        resolved = {name: make(name, value) for name, value in arguments.items()}
        for fixture in others:
            make(fixture.name, fixture)
        yield resolved
    except BaseException as failure:
        _tear_down(teardowns, failure)
        raise
    _tear_down(teardowns, None)


def _tear_down(
    teardowns: list[tuple[str, Generator[Any, None, None]]], failure: BaseException | None
) -> None:
    first: BaseException | None = None
    for name, generator in reversed(teardowns):
        try:
            next(generator)
        except StopIteration:
            continue
        except BaseException as error:
            if failure is not None:
                failure.add_note(f"(and the teardown of fixture {name!r} raised {error!r})")
            first = first or error
            continue
        first = first or ValueError(f"fixture {name!r} yielded more than once")
    if first is not None and failure is None:
        raise first
