"""The recording wrappers themselves: what they leave visible to user code, what they hold.

A wrapper sits between the user's line and torch_xla's function, so whatever torch_xla says about
the caller (a deprecation warning's line) must still name the user's line; and what it holds
until the flush must cost the ranks nothing beyond the recording (docs/events.md).
"""

from __future__ import annotations

import gc
import inspect
import warnings

import torch
import torch_xla
import torch_xla.core.xla_model as xm

from xlasim.events import hooks, model


def _mark_step_warnings(rank: int) -> tuple[int, list[tuple[str, int, str]]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = inspect.currentframe().f_lineno + 1
        xm.mark_step()
    return line, [(w.filename, w.lineno, w.category.__name__) for w in caught]


def test_mark_steps_deprecation_names_the_users_line(record, world, tmp_path, monkeypatch):
    """typing_extensions.deprecated warns at its caller's frame: under tracing, the wrapper's."""
    directory = tmp_path / "trace"
    monkeypatch.setenv("XLASIM_TRACE", str(directory))
    [(line, found)] = world.run(_mark_step_warnings, size=1)
    assert found == [(__file__, line, "DeprecationWarning")]
    [events] = model.read_ranks(directory).values()
    graphs = [e.fields["op"] for e in events if e.kind == model.GRAPH and e.phase == model.BEGIN]
    assert graphs == ["xm.mark_step"]


def _held_events(rank: int) -> list[tuple]:
    value = torch.ones(4, device=torch_xla.device())
    xm.all_reduce(xm.REDUCE_SUM, [value], groups=[[0]])
    xm.mark_step()
    stream = hooks.current_stream()
    held = list(stream._held)
    gc.collect()
    return [(event, gc.is_tracked(event)) for event in held]


def test_held_events_are_plain_values_the_collector_drops(world, tmp_path, monkeypatch):
    """A held event is numbers, strings and None: the garbage collector stops tracking it,
    so holding thousands of them does not make the interpreter's full collections (over all
    of torch's objects) come more often."""
    monkeypatch.setenv("XLASIM_TRACE", str(tmp_path / "trace"))
    [held] = world.run(_held_events, size=1)
    recorded = [(event, tracked) for event, tracked in held if not isinstance(event[3], dict)]
    assert len(recorded) == 4  # two spans; the launch's begin holds its labels' dict
    plain = (int, str, type(None))
    assert all(type(value) in plain for event, _ in recorded for value in event), recorded
    assert not any(tracked for _, tracked in recorded)
