"""A session on a machine of a pod (`--xla-machines`, docs/pods.md): every machine must run the
same tests in the same order.

Each machine's pytest process is the caller of every launch its tests make, and the machines'
launches meet one another in order: a test that one machine runs and another does not would
leave the other machines' ranks waiting in a collective that never comes (at best a timeout
naming nobody useful). So at the end of collection the machines compare their collected test
ids, and a difference is a usage error on every machine naming the first test that differs and
the machine that has it, before any test runs.

Hypothesis draws each example in the pytest process of every machine, and the ranks of all
machines run it together: the examples must be the same, example for example. So the profile in
force is made derandomized and database-free (`xla-pod`; a failure stored on one machine would
be replayed on that one only).
"""

from __future__ import annotations

from importlib.util import find_spec

import pytest

from ...base.errors import XlasimError
from ..options.settings import resolve
from ..session import backend_key, is_active

TOPIC = "the collected tests"
POD_PROFILE = "xla-pod"


@pytest.hookimpl(trylast=True)  # after Hypothesis' own plugin loaded --hypothesis-profile
def pytest_configure(config: pytest.Config) -> None:
    if not is_active(config) or resolve(config).pod is None or find_spec("hypothesis") is None:
        return
    from hypothesis import settings

    current = settings.get_profile(settings.get_current_profile_name())
    settings.register_profile(POD_PROFILE, current, derandomize=True, database=None)
    settings.load_profile(POD_PROFILE)


@pytest.hookimpl(trylast=True)  # after every hook that adds, removes or starts anything
def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    settings = resolve(config)
    if settings.pod is None or not is_active(config) or config.stash[backend_key] != "emulated":
        return
    if config.option.collectonly:
        return
    from ... import activation
    from ...pods.membership import from_environment

    mine = [item.nodeid for item in session.items]
    bound = from_environment().join_timeout  # type: ignore[union-attr]
    try:
        answers = activation.world().agree_across_machines(TOPIC, "\n".join(mine), bound)
    except XlasimError as error:  # a machine lost, or silent past the join bound
        raise pytest.UsageError(f"xlasim: {type(error).__name__}: {error}") from None
    for machine, text in sorted(answers.items()):
        theirs = text.split("\n") if text else []
        if theirs != mine:
            raise pytest.UsageError(
                f"xlasim: PodCollectionError: machine {machine} collected other tests than "
                f"machine {settings.pod.machine_rank} (this one): {_difference(mine, theirs)}. "
                "Every machine of a pod runs the same tests: give each the same arguments, "
                "files and -k/-m selection"
            )


def _difference(mine: list[str], theirs: list[str]) -> str:
    """The first place two machines' collections part: a test only one has, or the order."""
    for index, (here, there) in enumerate(zip(mine, theirs)):
        if here != there:
            return f"test {index + 1} is {there!r} there, {here!r} here"
    if len(mine) > len(theirs):
        return f"{len(mine)} tests here, {len(theirs)} there: {mine[len(theirs)]!r} is not there"
    return f"{len(mine)} tests here, {len(theirs)} there: {theirs[len(mine)]!r} is not here"
