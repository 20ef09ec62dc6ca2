"""A collective is one module: its `RECORD` in `xlasim/emulation/collectives/<name>.py`.

The registry must name exactly torch_xla's collectives of `base/collective_names.py` (the list
tracing records), one module each, and every record must reach each place that serves it: its
eager function uses the combine arithmetic it names, `xm.<name>` and its `_XLAC` aliases are patched, tracing
wraps it, `torch.compile` traces it as the op (or breaks the graph at it, refusing
fullgraph=True), and docs/compat.md lists it.
"""

from __future__ import annotations

import json
import pkgutil
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch_xla
import torch_xla.core.xla_model as xm

from xlasim.base.collective_names import XM_COLLECTIVES
from xlasim.emulation import collectives, patches
from xlasim.emulation.collectives import REGISTRY, XLAC_ALIASES, ordered
from xlasim.events import hooks

COMPAT_TABLE = Path(__file__).resolve().parents[2] / "docs" / "compat.md"
TRACED = sorted(name for name, c in REGISTRY.items() if not c.cuts_graph)
CUTTING = sorted(name for name, c in REGISTRY.items() if c.cuts_graph)

#: One call of each traced collective on a world of 2, as a compiled function's body.
EXAMPLES = {
    "all_reduce": lambda t: xm.all_reduce(xm.REDUCE_SUM, t),
    "all_gather": lambda t: xm.all_gather(t),
    "reduce_scatter": lambda t: xm.reduce_scatter(xm.REDUCE_SUM, t, 1.0, 0, 2),
    "all_to_all": lambda t: xm.all_to_all(t, 0, 0, 2),
    "collective_permute": lambda t: xm.collective_permute(t, [[0, 1], [1, 0]]),
    "collective_broadcast": lambda t: xm.collective_broadcast([t]),
}


def test_the_registry_is_the_names_list_in_order():
    assert tuple(REGISTRY) == XM_COLLECTIVES
    assert all(name == record.name for name, record in REGISTRY.items())


def test_each_public_module_of_the_package_is_one_collective():
    public = [m.name for m in pkgutil.iter_modules(collectives.__path__) if m.name[0] != "_"]
    records = [getattr(collectives, name).RECORD for name in public]
    assert sorted(r.name for r in records) == sorted(REGISTRY)
    assert all(REGISTRY[r.name] is r for r in records)
    assert all(r.eager.__module__ == f"{collectives.__name__}.{m}" for r, m in zip(records, public))


def test_a_collective_without_its_module_or_its_name_is_refused_naming_it():
    records = list(REGISTRY.values())
    with pytest.raises(ImportError, match=r"no module .* declares a RECORD for \['recv'\]"):
        ordered([r for r in records if r.name != "recv"], XM_COLLECTIVES)
    with pytest.raises(ImportError, match=r"declares \['all_max'\], which .* does not name"):
        ordered([*records, replace(REGISTRY["all_reduce"], name="all_max")], XM_COLLECTIVES)


def test_each_eager_function_runs_the_combine_of_its_record():
    for record in REGISTRY.values():
        if record.combine is not None:
            assert record.combine.__name__ in record.eager.__code__.co_names, record.name


def test_a_traced_twin_comes_with_its_shape_rule_and_kernel():
    for record in REGISTRY.values():
        has = (record.shapes is not None, record.kernel is not None)
        assert has == ((True, True) if record.traced else (False, False)), record.name


def test_every_entry_and_its_xlac_aliases_are_patched(world):
    installed = patches.installed()
    patched_xm = {p.name for p in installed if p.owner is xm}
    patched_xlac = {p.name for p in installed if p.owner is torch_xla._XLAC}
    assert set(REGISTRY) <= patched_xm, f"not patched: {set(REGISTRY) - patched_xm}"
    assert set(XLAC_ALIASES) <= patched_xlac, f"not patched: {set(XLAC_ALIASES) - patched_xlac}"


def test_every_entry_is_recorded_by_events():
    wrapped = {name for owner, name, _ in hooks._targets() if owner is xm}
    assert set(REGISTRY) <= wrapped, f"not recorded: {set(REGISTRY) - wrapped}"


def test_every_entry_and_alias_is_listed_in_compat_md():
    table = set(re.findall(r"^\| `([^`]+)` \|", COMPAT_TABLE.read_text(), flags=re.MULTILINE))
    wanted = {f"torch_xla.core.xla_model.{name}" for name in REGISTRY}
    wanted |= {f"torch_xla._XLAC.{alias}" for alias in XLAC_ALIASES}
    assert wanted <= table, f"not in docs/compat.md: {sorted(wanted - table)}"


def test_every_traced_entry_has_an_example():
    assert sorted(EXAMPLES) == TRACED


def _ops_traced(rank: int, name: str) -> list[str]:
    graphs = []

    def capture(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        graphs.append(gm)
        return gm.forward

    program = torch.compile(EXAMPLES[name], backend=capture, fullgraph=True)
    program(torch.arange(4.0, device=torch_xla.device()) + rank)
    return [
        json.loads(node.args[1])[0]
        for gm in graphs
        for node in gm.graph.nodes
        if node.target in (torch.ops.xlasim.collective, torch.ops.xlasim.collective.default)
    ]


@pytest.mark.parametrize("name", TRACED)
def test_a_traced_entry_is_one_node_of_the_op_under_torch_compile(world, name):
    assert world.run(_ops_traced, args=(name,), size=2) == [[name], [name]]


def _fullgraph_refusal(rank: int, name: str) -> str:
    t = torch.zeros(4, device=torch_xla.device())
    calls = {
        "send": lambda: xm.send(t, 7),
        "recv": lambda: xm.recv(t, 7),
        "xla_rendezvous": lambda: xm.xla_rendezvous(b""),
        "rendezvous": lambda: xm.rendezvous("tag"),
    }
    try:
        torch.compile(calls[name], backend="eager", fullgraph=True)()
    except Exception as error:  # dynamo's Unsupported, naming the reason
        return str(error)
    return "traced"


@pytest.mark.parametrize("name", CUTTING)
def test_a_graph_cutting_entry_refuses_fullgraph_saying_why(world, name):
    (message,) = world.run(_fullgraph_refusal, args=(name,), size=1)
    assert "cannot be a node of a compiled graph" in message
