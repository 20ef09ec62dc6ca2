"""Emulated collectives inside `torch.compile` programs, as one opaque torch op.

Dynamo cannot trace the emulation (rank threads, locks, frame inspection), and XLA's own
collectives cannot run across the CPU client's devices. So under dynamo a collective becomes
`xlasim::collective(Tensor[] tensors, str request) -> Tensor[]`, which dynamo records as is:
tracing uses its fake kernel (result shapes only); its XLA kernel runs the emulated collective.

The openxla bridge partitions a graph on its first call: it runs every node once to find those
it cannot compile (CPU fallbacks), compiles and caches XLA programs for the runs of nodes in
between, and from then on runs the uncompilable nodes eagerly between those programs. An XLA
kernel that meets other ranks and returns device data would be compiled into a program as a
constant: every later call would return the first call's result. So:

- the bridge is made to count collectives (and the nodes that only move their results on) as
  uncompilable: they run eagerly, on every call;
- while the bridge runs a graph to analyse it, collectives return lazy placeholders without
  meeting any rank, since on a TPU that run only traces: every rank meets the others exactly
  once per collective its program calls, whichever rank compiles when.

Under dynamo the `xm` functions become calls of the op (their records' traced twins,
`collectives/`), and `xla_level.py` maps torch.distributed's traceable collectives onto
the same op; this module is the op's kernels (each record's shape rule and kernel, looked up by
the collective's name in the op's request) and the bridge's changes.
"""

from __future__ import annotations

import json
import operator
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..base import emulated_slice
from ..base.errors import UnsupportedCollectiveError
from .collectives import REGISTRY, XLAC_ALIASES, host_copies
from .compile_dispatch import NAMESPACE
from .transfer import to_device, to_host

Args = dict[str, Any]
Shape = Sequence[int]


# ------------------------------------------------------------------------------ the op


def _decode(text: str) -> tuple[str, Args]:
    op, args = json.loads(text)
    return op, args


def _fake(tensors: list[torch.Tensor], text: str) -> list[torch.Tensor]:
    op, args = _decode(text)
    shapes = REGISTRY[op].shapes([t.shape for t in tensors], args)
    return [t.new_empty(shape) for t, shape in zip(tensors, shapes)]


def _serve(tensors: list[torch.Tensor], text: str) -> list[torch.Tensor]:
    """The XLA kernel: the emulated collective on host copies of the inputs (which it may change
    in place; the compiled path's one copy), its results handed to the inputs' device as views."""
    op, args = _decode(text)
    device = tensors[0].device
    if bridge_analysis.active:  # lazy zeros, as an in-graph collective's result would be lazy
        shapes = REGISTRY[op].shapes([t.shape for t in tensors], args)
        return [
            torch.zeros(shape, dtype=t.dtype, device=device) for t, shape in zip(tensors, shapes)
        ]
    with host_copies():  # the inputs' one copy, on the host: the collective takes it as is
        results = REGISTRY[op].kernel(to_host(tensors, copy=True), args)
    return to_device(results, device)


def define(library: torch.library.Library) -> None:
    """Define `xlasim::collective` in `library` (the `xlasim` namespace, kind DEF)."""
    library.define("collective(Tensor[] tensors, str request) -> Tensor[]")
    library.impl("collective", _serve, "XLA")
    torch.library.register_fake(f"{NAMESPACE}::collective", _fake, lib=library)


# ------------------------------------------------------------------------------ the openxla bridge


class _Analysis(threading.local):
    active = False


#: Whether this thread is inside the openxla bridge's analysis of a new graph.
bridge_analysis = _Analysis()
#: The bridge finds CPU-fallback nodes by clearing and reading torch_xla's process-wide counters
#: around each node: one rank's analysis at a time, or a rank would take another's counts for
#: its own (and compile a fallback op's eager result into its program).
_analysis_lock = threading.Lock()


def _is_collective(node: torch.fx.Node) -> bool:
    return isinstance(node.target, torch._ops.OpOverload) and node.target.namespace in (
        NAMESPACE,
        "_c10d_functional",
    )


_aten = torch.ops.aten
#: Ops that at most move or convert their input's data (often no XLA computation at all).
_PASS_THROUGH = frozenset(
    {
        operator.getitem,
        _aten.copy.default,
        _aten.copy_.default,
        _aten.clone.default,
        _aten.alias.default,
        _aten.detach.default,
        _aten._to_copy.default,
    }
)


def _carries_collective(node: torch.fx.Node) -> bool:
    """A collective, or a node that only passes a collective's result on."""
    if _is_collective(node):
        return True
    return node.target in _PASS_THROUGH and any(map(_carries_collective, node.all_input_nodes))


def collector_run_node(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap `UnsupportedNodesCollector.run_node`: collectives, and the nodes that only move their
    results on (wait_tensor, getitem, a copy into a buffer), are uncompilable. The latter must run
    eagerly too: in an XLA partition of their own they would only pass device data through, which
    the bridge mishandles (it caches no program for a partition without computation, and
    miscounts outputs that share one buffer)."""

    def run_node(self: Any, n: torch.fx.Node) -> Any:  # the original's parameter name
        result = original(self, n)
        if _carries_collective(n) and n not in self._unsupported_nodes:
            self._unsupported_nodes.append(n)
        return result

    run_node.__wrapped__ = original  # type: ignore[attr-defined]
    return run_node


def bridge_extract(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap `dynamo_bridge.extract_compiled_graph`, which analyses, partitions and compiles a new
    graph on its first call: collectives return placeholders meanwhile, and a graph the bridge
    would not partition (it has symbolic sizes) must not hold collectives."""

    def extract_compiled_graph(xla_model: torch.fx.GraphModule, xla_args: Sequence[Any]) -> Any:
        symbolic = any(not isinstance(a, torch.Tensor) for a in xla_args)
        if symbolic and any(_is_collective(n) for n in xla_model.graph.nodes):
            raise UnsupportedCollectiveError(
                "torch.compile with dynamic shapes: the openxla bridge compiles a graph with "
                "symbolic sizes into one XLA program, with no room for a collective the emulation "
                "runs on the host between XLA programs. Compile with dynamic=False (a recompile "
                "for a new shape otherwise turns dynamic by itself)."
            )
        from torch._dynamo.convert_frame import compile_lock

        # The bridge's partitioning builds FX nodes, and FX copies its process-wide "current
        # node meta" into every new node while any thread traces with `preserve_node_meta`
        # (dynamo, on another rank): the analysis would fail in FX ("replace_with already has
        # .meta keys"). So it holds dynamo's own compile lock too, as dynamo's tracing does.
        with compile_lock, _analysis_lock:
            bridge_analysis.active = True
            try:
                return original(xla_model, xla_args)
            finally:
                bridge_analysis.active = False

    extract_compiled_graph.__wrapped__ = original  # type: ignore[attr-defined]
    return extract_compiled_graph


# ------------------------------------------------------------------------------ dynamo in threads


def fx_tracing_check(original: Callable[[], bool]) -> Callable[[], bool]:
    """`torch.compile`d functions refuse to run while FX traces, judging by a process-wide flag,
    which dynamo's own compilation raises while it traces. Ranks are threads: a rank must not take
    another rank's compilation for an FX trace of its own, so the flag counts only when this
    thread is inside `Tracer.trace` (looked up only when the flag is up)."""
    import torch.fx._symbolic_trace as fx_trace

    def tracing_here() -> bool:
        frame = sys._getframe()
        while frame is not None:
            code = frame.f_code
            if code.co_name == "trace" and code.co_filename == fx_trace.__file__:
                return True
            frame = frame.f_back
        return False

    def is_fx_symbolic_tracing() -> bool:
        return original() and tracing_here()

    is_fx_symbolic_tracing.__wrapped__ = original  # type: ignore[attr-defined]
    return is_fx_symbolic_tracing


class _DynamicSetting:
    """Compiled calls running with a `dynamic=` setting, and the settings to restore after."""

    KEYS = ("assume_static_by_default", "automatic_dynamic_shapes")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.saved: dict[str, Any] = {}


def shared_dynamic_setting(original: Callable[[bool], Any]) -> Callable[[bool], Any]:
    """Wrap `eval_frame.make_set_enable_dynamic`. A function compiled with `dynamic=True/False`
    sets two process-wide dynamo settings for the length of each call, then restores what it
    found. Ranks calling at once restore each other's values and leave the setting stuck (every
    later compilation dynamic, say); here the settings found by the first call to start are
    restored when the last one ends."""
    import torch._dynamo.config as config

    state = _DynamicSetting()

    def make_set_enable_dynamic(enable: bool) -> Callable[[], Callable[[], None]]:
        change = original(enable)

        def shared_change() -> Callable[[], None]:
            with state.lock:
                if state.running == 0:
                    state.saved = {key: getattr(config, key) for key in state.KEYS}
                state.running += 1
                change()  # its own revert would restore another rank's values

            def revert() -> None:
                with state.lock:
                    state.running -= 1
                    if state.running == 0:
                        for key, value in state.saved.items():
                            setattr(config, key, value)

            return revert

        return shared_change

    make_set_enable_dynamic.__wrapped__ = original  # type: ignore[attr-defined]
    return make_set_enable_dynamic


# ------------------------------------------------------------------------------ installing


@dataclass(frozen=True)
class Registration:
    """Kernels to register in a new `torch.library.Library(namespace, kind, key)`."""

    namespace: str
    kind: str
    key: str
    fill: Callable[[torch.library.Library], None]


class TorchLibraries(MutableMapping):
    """torch.library registrations by name, so that patches.py installs them like attributes:
    setting a name registers a `Registration` in a library of its own; setting it again
    replaces it (the old library is destroyed, which restores the kernels it overrode)."""

    def __init__(self) -> None:
        self._libraries: dict[str, tuple[Registration, torch.library.Library, set[str]]] = {}

    def __getitem__(self, name: str) -> Registration:
        return self._libraries[name][0]

    def __setitem__(self, name: str, registration: Registration) -> None:
        if name in self._libraries:
            del self[name]
        held = set(torch.library._impls)  # Python overrides already present (torch_xla's)
        library = torch.library.Library(registration.namespace, registration.kind, registration.key)
        with warnings.catch_warnings():  # "Overriding a previously registered kernel": we mean to
            warnings.simplefilter("ignore", UserWarning)
            registration.fill(library)
        self._libraries[name] = (registration, library, held & library._op_impls)

    def __delitem__(self, name: str) -> None:
        _, library, held = self._libraries.pop(name)
        library._destroy()  # torch's only way to unregister; it forgets `held` keys too,
        library._op_impls.clear()  # and would again when the library is collected
        torch.library._impls.update(held)

    def __iter__(self) -> Iterator[str]:
        return iter(self._libraries)

    def __len__(self) -> int:
        return len(self._libraries)


registrations = TorchLibraries()


def patches() -> list[tuple[Any, str, Any]]:
    """(owner, attribute, replacement) triples that make collectives work under torch.compile
    and refuse the XLA-level ones on ranks."""
    import torch._dynamo.config as dynamo_config
    import torch._dynamo.eval_frame as eval_frame
    import torch.fx._symbolic_trace as fx_trace
    import torch_xla
    import torch_xla.core.dynamo_bridge as bridge

    from . import xla_level

    # Each rank thread compiles its own graphs (dynamo guards on the device): limits per
    # function that hold for one TPU process must hold for every rank thread this process may
    # hold (the launching process can hold a threaded world of its host's cores).
    ranks = emulated_slice.topology().cores_per_host
    targets: list[tuple[Any, str, Any]] = [
        (registrations, "xlasim::collective", Registration(NAMESPACE, "DEF", "", define)),
        (
            registrations,
            "_c10d_functional XLA kernels",
            Registration("_c10d_functional", "IMPL", "XLA", xla_level.register),
        ),
        (bridge, "extract_compiled_graph", bridge_extract(bridge.extract_compiled_graph)),
        (
            bridge.UnsupportedNodesCollector,
            "run_node",
            collector_run_node(bridge.UnsupportedNodesCollector.run_node),
        ),
        (fx_trace, "is_fx_symbolic_tracing", fx_tracing_check(fx_trace.is_fx_symbolic_tracing)),
        (
            eval_frame,
            "make_set_enable_dynamic",
            shared_dynamic_setting(eval_frame.make_set_enable_dynamic),
        ),
        (dynamo_config, "recompile_limit", dynamo_config.recompile_limit * ranks),
        (
            dynamo_config,
            "accumulated_recompile_limit",
            dynamo_config.accumulated_recompile_limit * ranks,
        ),
    ]
    for name, instead in XLAC_ALIASES.items():
        original = getattr(torch_xla._XLAC, name)
        targets.append((torch_xla._XLAC, name, xla_level.refuse_on_ranks(name, instead, original)))
    return targets
