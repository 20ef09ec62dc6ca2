"""`torchrun` on emulated cores: `xlasim run --torchrun SCRIPT` runs the script as `__main__` on
every rank, each with the environment torchrun gives its worker processes.

torchrun (`torch.distributed.run`) starts one process per device, and each runs the whole
script; torch_xla's `torch_xla.launch` then calls its function in that process with LOCAL_RANK
(torch_xla/torch_xla.py) instead of spawning, and scripts such as torch_xla's own
test_mp_early_exit.py refuse to run unless `dist.is_torchelastic_launched()`. Each emulated rank
is such a worker: with one process per core (the default topology) every rank has its own
`os.environ`, `sys.argv` and `__main__`, which ranks that are threads of one process cannot
have, so the threads mode is refused.

The environment is torch 2.9's, variable for variable: what `LocalElasticAgent._start_workers`
sets (torch/distributed/elastic/agent/server/local_elastic_agent.py), OMP_NUM_THREADS=1 when a
node runs more than one worker and the caller set none (torch/distributed/run.py), and a
TORCHELASTIC_ERROR_FILE per worker under a `torchelastic_*` log directory
(torch/distributed/elastic/multiprocessing/api.py, DefaultLogsSpecs), with torchrun's defaults:
static rendezvous, run id `none`, role `default`, no restarts, master 127.0.0.1. Each emulated
host is a node (GROUP_RANK = host index, LOCAL_RANK = the rank's index on its host), as
`torchrun --nnodes H --node-rank h` on every host of a pod. As with the static rendezvous, the
agent hosts a TCPStore at MASTER_ADDR:MASTER_PORT that the workers reach as clients
(TORCHELASTIC_USE_AGENT_STORE=True), so `init_process_group` through `env://` (gloo) works;
its port is a free one rather than torchrun's fixed 29500, so that runs side by side do not
clash. As under torchrun, a worker that raises or exits non-zero fails the job (the others are
stopped) and the launcher's exit status is 1.
"""

from __future__ import annotations

import os
import runpy
import sys
import tempfile
from collections.abc import Mapping, Sequence

from .base.errors import XlasimError
from .base.topology import Topology

#: torchrun's defaults for a plain `torchrun --nproc-per-node N script.py`.
RUN_ID = "none"
ROLE = "default"
MASTER_ADDR = "127.0.0.1"


class WorkerExitError(XlasimError):
    """A rank's script ended with a non-zero exit status: under torchrun its worker process
    exits with it and the agent stops the job's other workers."""


def unsupported(topology: Topology) -> str | None:
    """Why torchrun cannot be emulated on `topology`, or None when it can."""
    if topology.cores_per_process == 1:
        return None
    return (
        f"--torchrun needs one process per core (torchrun starts a process per device, each with "
        f"its own environment); this slice is {topology.describe()}: drop --processes, or set it "
        f"to the core count ({topology.devices})"
    )


def worker_environments(
    topology: Topology, master_port: int, log_dirs: Sequence[str], inherited: Mapping[str, str]
) -> list[dict[str, str]]:
    """The variables torchrun adds to each worker's environment, by global rank.

    Args:
        topology: the emulated slice; one worker per core, a node per host.
        master_port: the port of the agent's store the workers connect to (`MASTER_PORT`).
        log_dirs: each node's (host's) run log directory, by host index, where each worker's
            error file goes.
        inherited: the launching environment; `OMP_NUM_THREADS` and
            `TORCH_NCCL_ASYNC_ERROR_HANDLING` set there are kept.
    """
    local_world_size = topology.processes_per_host
    threads = inherited.get("OMP_NUM_THREADS", "1" if local_world_size > 1 else None)
    environments = []
    for rank in range(topology.devices):
        local_rank = topology.local_rank_of(rank)
        host = topology.host_of(rank)
        environment = {
            "LOCAL_RANK": str(local_rank),
            "RANK": str(rank),
            "GROUP_RANK": str(host),
            "ROLE_RANK": str(rank),
            "ROLE_NAME": ROLE,
            "LOCAL_WORLD_SIZE": str(local_world_size),
            "WORLD_SIZE": str(topology.devices),
            "GROUP_WORLD_SIZE": str(topology.hosts),
            "ROLE_WORLD_SIZE": str(topology.devices),
            "MASTER_ADDR": MASTER_ADDR,
            "MASTER_PORT": str(master_port),
            "TORCHELASTIC_RESTART_COUNT": "0",
            "TORCHELASTIC_MAX_RESTARTS": "0",
            "TORCHELASTIC_RUN_ID": RUN_ID,
            "TORCHELASTIC_USE_AGENT_STORE": "True",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": inherited.get(
                "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"
            ),
            "TORCHELASTIC_ERROR_FILE": os.path.join(
                log_dirs[host], "attempt_0", str(local_rank), "error.json"
            ),
        }
        if threads is not None:
            environment["OMP_NUM_THREADS"] = threads
        environments.append(environment)
    return environments


def _log_dirs(topology: Topology) -> list[str]:
    """Each node's run log directory, with a directory per worker for its error file, laid out
    as DefaultLogsSpecs does (`torchelastic_*/none_*/attempt_0/LOCAL_RANK`)."""
    dirs = []
    for _ in range(topology.hosts):
        root = tempfile.mkdtemp(prefix="torchelastic_")
        run = tempfile.mkdtemp(prefix=f"{RUN_ID}_", dir=root)
        for local_rank in range(topology.processes_per_host):
            os.makedirs(os.path.join(run, "attempt_0", str(local_rank)))
        dirs.append(run)
    return dirs


def launch(target: str, args: Sequence[str], module: bool) -> None:
    """Run `target` (a script path, or a module name with `module`) as torchrun's workers on
    every rank of the emulated world; raises `RankFailedError` when a worker failed.

    Args:
        target: the script's path as given (relative to the working directory), or the module's
            dotted name.
        args: the script's own arguments (its `sys.argv[1:]`).
        module: whether `target` is a module (`-m`) rather than a path.
    """
    import torch.distributed as dist

    from .activation import topology, world

    slice = topology()
    # The agent's store, which the workers reach as clients: open until this returns.
    store = dist.TCPStore(MASTER_ADDR, 0, is_master=True, wait_for_workers=False)
    environments = worker_environments(slice, store.port, _log_dirs(slice), os.environ)
    # Ranks of other emulated hosts work in their hosts' directories: the script's absolute
    # path, resolved here, for those where the path as given names nothing.
    script = target if module else os.path.abspath(target)
    world().run(_worker, (environments, target, script, tuple(args), module))


def _worker(
    rank: int,
    environments: Sequence[Mapping[str, str]],
    target: str,
    script: str,
    args: Sequence[str],
    module: bool,
) -> None:
    """One torchrun worker: the script as `__main__` with the rank's torchrun environment, by
    the path as given (its argv[0], as torchrun's) where it names the script from this rank's
    directory, else by `script`, the absolute path the launcher resolved."""
    os.environ.update(environments[rank])
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [target, *args]
    try:
        if module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            path = target if os.path.isfile(target) else script
            sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
            runpy.run_path(path, run_name="__main__")
    except SystemExit as exit:
        status = exit_status(exit.code)
        if not isinstance(exit.code, (int, type(None))):
            print(exit.code, file=sys.stderr)  # as the interpreter prints `sys.exit("message")`
        if status != 0:
            raise WorkerExitError(
                f"rank {rank} exited with status {status} (under torchrun its worker process "
                "would end with it, and the agent would stop the others)"
            ) from None
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def exit_status(code: object) -> int:
    """The process exit status `SystemExit(code)` produces."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1
