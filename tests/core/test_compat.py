"""The compat boundary (docs/compat.md): what xlasim borrows from torch, torch_xla and pytest.

Only the exact version pins protect these symbols, so each is checked here against the
installed packages:

- every patch's replacement takes the arguments of the original it replaces (names, kinds,
  defaults: a caller's call binds the same way), or is a pure pass-through to that original;
- every patched and every privately imported symbol is in docs/compat.md's table, and every
  symbol of the table still exists;
- torch_xla's own helpers built on the patched functions (`xm.reduce_gradients`, the
  bucketized collectives, `xm.mesh_reduce`, the `xla` process group of
  `torch_xla.distributed.xla_backend`) reach the emulation: the world counts the emulated
  collectives they complete.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_backend  # registers the `xla` backend

from xlasim.emulation import patches

COMPAT_TABLE = Path(__file__).resolve().parents[2] / "docs" / "compat.md"

#: Patches whose target is not a function, so there is no signature to compare, and why.
NOT_FUNCTIONS = {
    "torch.distributed.distributed_c10d._world": "the process-group registry object, replaced "
    "by a proxy that routes each attribute to the calling rank's registry",
    "torch._dynamo.config.recompile_limit": "a number, raised for the rank threads",
    "torch._dynamo.config.accumulated_recompile_limit": "a number, raised for the rank threads",
    "torch.library: xlasim::collective": "a library registration of xlasim's own op",
    "torch.library: _c10d_functional XLA kernels": "a library registration (the XLA kernels of "
    "torch.distributed's traceable collectives)",
}
#: Originals that are C++ builtins without a signature, and the parameters their callers pass.
BUILTINS = {
    "torch.distributed.distributed_c10d._unregister_all_process_groups": [],
    "torch_xla._XLAC._xla_step_marker": ["device", "devices", "wait", "reset_scope"],
    "torch_xla._XLAC._xla_sync_multi": ["tensors", "devices", "wait", "sync_xla_data"],
    "torch_xla._XLAC._clear_pending_irs": ["device"],
    "torch_xla._XLAC._xla_warm_up_cache": ["tensors", "devices"],
    "torch_xla._XLAC._xla_dot_general": [
        "lhs",
        "rhs",
        "dimension_numbers",
        "precision_config",
        "preferred_element_type",
    ],
}
PASS_THROUGH = [
    ("args", inspect.Parameter.VAR_POSITIONAL),
    ("kwargs", inspect.Parameter.VAR_KEYWORD),
]


def qualified(owner: Any, name: str) -> str:
    """The dotted name a patch target is known by (as docs/compat.md lists it)."""
    if isinstance(owner, dict):
        return f"torch.distributed.rendezvous._rendezvous_handlers['{name}']"
    if isinstance(owner, type):
        return f"{owner.__module__}.{owner.__qualname__}.{name}"
    module = getattr(owner, "__name__", None)
    if module is None:  # compiled.py's registry of torch.library registrations
        return f"torch.library: {name}"
    return f"{'torch_xla._XLAC' if module == '_XLAC' else module}.{name}"


def parameters(fn: Callable[..., Any], follow_wrapped: bool = True) -> list[tuple]:
    signature = inspect.signature(fn, follow_wrapped=follow_wrapped)
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


def forwards_to(wrapper: Any, original: Any) -> bool:
    """Whether a chain of wrappers (each `__wrapped__` the next) ends at `original`: the HBM
    check wraps compilation/turns.py's step marker, which wraps torch_xla's."""
    while wrapper is not original and hasattr(wrapper, "__wrapped__"):
        wrapper = wrapper.__wrapped__
    return wrapper is original


def applied(world) -> list[tuple[str, Any, Any]]:
    """(qualified name, original, replacement) of every patch the emulation installed."""
    installed = patches.installed()
    assert installed, "the world fixture installs the emulation"
    return [(qualified(p.owner, p.name), p.original, p.replacement) for p in installed]


def test_every_replacement_takes_the_arguments_of_the_original(world):
    compared, mismatched = 0, []
    for name, original, replacement in applied(world):
        if name in NOT_FUNCTIONS:
            continue
        mine = parameters(replacement, follow_wrapped=False)
        if [(n, k) for n, k, _ in mine] == PASS_THROUGH:
            # A wrapper that forwards every argument: it binds as the original it forwards to.
            assert forwards_to(replacement, original), f"{name} forwards to another function"
            on_rank = getattr(replacement, "on_rank", None)  # world_of_one: emulated on a rank
            if on_rank is not None and parameters(original) != parameters(on_rank, False):
                mismatched.append(f"{name} on a rank: {parameters(on_rank, False)}")
        elif name in BUILTINS:
            assert [n for n, _, _ in mine] == BUILTINS[name], name
        elif parameters(original) != mine:
            mismatched.append(f"{name}: {parameters(original)} != {mine}")
        compared += 1
    assert not mismatched, "\n".join(mismatched)
    assert compared >= 40  # every callable patch was looked at


def test_the_exceptions_above_are_all_patched(world):
    names = {name for name, _, _ in applied(world)}
    assert set(NOT_FUNCTIONS) | set(BUILTINS) <= names


def _table_symbols() -> list[str]:
    """The first column of docs/compat.md's tables: one borrowed symbol per row."""
    return re.findall(r"^\| `([^`]+)` \|", COMPAT_TABLE.read_text(), flags=re.MULTILINE)


def test_the_table_lists_every_patched_symbol(world):
    listed = set(_table_symbols())
    missing = sorted({name for name, _, _ in applied(world)} - listed)
    assert not missing, f"patched but not in docs/compat.md: {missing}"


def resolve(dotted: str) -> Any:
    """The object a dotted name of the table names: the longest importable module prefix,
    then attributes (`torch.library: ...` rows and `[...]` keys name entries, not attributes)."""
    if dotted.startswith("torch.library: "):
        return dotted
    dotted, _, key = dotted.partition("['")
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        for part in parts[end:]:
            found = getattr(found, part)
        return found[key.rstrip("']")] if key else found
    raise ImportError(dotted)


def test_every_symbol_of_the_table_exists_in_the_installed_packages(world):
    symbols = _table_symbols()
    assert len(symbols) >= 60
    missing = []
    for symbol in symbols:
        try:
            resolve(symbol)
        except (ImportError, AttributeError, KeyError) as error:
            missing.append(f"{symbol}: {error!r}")
    assert not missing, "\n".join(missing)


# ------------------------------------------------------------------ helpers reach the emulation


def emulated(world, fn: Callable[[int], Any]) -> tuple[list[Any], Counter[str]]:
    """`fn` on every rank, and the emulated collectives the run completed, by op."""
    before = Counter(world.collectives)
    results = world.run(fn)
    return results, world.collectives - before


def test_reduce_gradients_averages_through_the_emulated_all_reduce(world):
    def fn(rank):
        device = torch_xla.device()
        model = torch.nn.Linear(3, 2).to(device)  # gradients do not depend on the weights
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.full((4, 3), float(rank + 1), device=device)).sum().backward()
        xm.reduce_gradients(optimizer)
        return [p.grad.cpu() for p in model.parameters()]

    results, used = emulated(world, fn)
    assert used == {"all_reduce": 1}  # one bucket: both gradients in one emulated all_reduce
    # whole-number inputs: bf16 holds them, so the TPU's default precision is exact here
    mean_input = sum(range(1, world.size + 1)) / world.size
    weight, bias = results[0]
    torch.testing.assert_close(weight, torch.full((2, 3), 4 * mean_input))
    torch.testing.assert_close(bias, torch.full((2,), 4.0))
    assert all(torch.equal(w, weight) and torch.equal(b, bias) for w, b in results)


def test_bucketized_collectives_go_through_the_emulated_ones(world):
    def fn(rank):
        device = torch_xla.device()
        values = [torch.full((2,), float(rank), device=device), torch.ones(3, device=device)]
        gathered = xm.all_gather_bucketized(values, bucket_cap_mb=1)
        scattered = xm.reduce_scatter_bucketized(
            xm.REDUCE_SUM, [torch.ones(world.size * 2, device=device)], 1.0, 0, world.size
        )
        return [t.cpu() for t in gathered], [t.cpu() for t in scattered]

    results, used = emulated(world, fn)
    assert used == {"all_gather": 1, "reduce_scatter": 1}
    for gathered, scattered in results:
        assert torch.equal(gathered[0], torch.arange(world.size).float().repeat_interleave(2))
        assert torch.equal(gathered[1], torch.ones(3 * world.size))
        assert torch.equal(scattered[0], torch.full((2,), float(world.size)))


def test_mesh_reduce_goes_through_the_emulated_rendezvous(world):
    results, used = emulated(world, lambda rank: xm.mesh_reduce("compat", rank, sum))
    assert used == {"rendezvous": 1}
    assert results == [sum(range(world.size))] * world.size


def test_the_xla_process_group_goes_through_the_emulation(world):
    def fn(rank):
        dist.init_process_group("xla", init_method="xla://")
        try:
            assert dist.get_backend() == "xla"
            value = torch.full((2,), float(rank), device=torch_xla.device())
            dist.all_reduce(value)
            dist.barrier()
            return value.cpu()
        finally:
            dist.destroy_process_group()

    results, used = emulated(world, fn)
    assert used["all_reduce"] == 1 and used["barrier"] >= 1, used
    assert all(torch.equal(r, torch.full((2,), float(sum(range(world.size))))) for r in results)
