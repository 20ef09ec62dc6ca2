"""Ranks: where emulated ranks run, and the world that supervises them.

A `World` (`world`) holds warm ranks: threads of this process (`threads`) or worker processes
(`processes` in the parent, `worker` in the worker, forked from the `zygote`), payloads between
processes in shared memory (`shared_payloads`). Each launch starts as a fresh TPU process would
(`launch_reset`); a rank thread cannot end the process (`exit_guard`); torch_xla's launchers run
on the world (`launchers`). Imports base, reports and emulation.
"""
