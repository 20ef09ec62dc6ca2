"""torch_xla's collectives by name: the one list of them.

The emulation replaces each (`emulation/patches.py`, with its module in `emulation/collectives/`,
whose records tests/core/test_collective_registry.py checks are these) and tracing records each
(`events/hooks.py`), so a collective added here is both emulated and recorded; neither can miss
one the other has.
"""

#: The collectives of `torch_xla.core.xla_model` (`xm.<name>`) that xlasim emulates.
XM_COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "collective_permute",
    "collective_broadcast",
    "send",
    "recv",
    "xla_rendezvous",
    "rendezvous",
)
