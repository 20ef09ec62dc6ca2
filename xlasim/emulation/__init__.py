"""The emulation of torch_xla: what its collectives, runtime queries and SPMD do on a TPU slice.

Ranks meet at a rendezvous (`rendezvous.Run`), which checks that their calls match and computes
each collective's result once; the `xm` collectives (`collectives/`, one module each), those under
`torch.compile` (`compiled`) and below the Python API (`xla_level`), `torch.distributed`'s `xla`
backend (`distributed`), the runtime's answers (`queries`), SPMD (`spmd`) and the shared-generator
guard (`seeding`) are installed into torch_xla by `patches`. Imports base and reports.
"""
