"""The event stream: what every rank did, in its program order, for tools that look at runs.

Collective timelines (`xlasim.trace_files`) and race detection read the same stream (docs/events.md):
- `model`: what an event is (kinds, phases, fields) and reading a recorded stream back;
- `recorder`: switching recording on and off, and writing each rank's events as they happen;
- `hooks`: the wrappers that emit them, installed at the torch_xla / torch attributes user code
  calls, the same in emulation and natively.
"""
