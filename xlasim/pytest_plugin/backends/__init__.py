"""The backends that play a session's ranks, interchangeable behind `protocol.Executor`: the
emulated world (`emulated`) and torch_xla's own `xmp.spawn` (`native`, `native_worker`), and
the hook that chooses one (`choice`)."""
