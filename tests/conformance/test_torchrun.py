"""`xlasim run --torchrun`: a script written for `torchrun` runs as `__main__` on every emulated
rank, with the environment torchrun gives each of its worker processes.

torch_xla's test_mp_early_exit.py and pjrt/test_torchrun.py refuse to run unless
`dist.is_torchelastic_launched()`; scripts read RANK / LOCAL_RANK / WORLD_SIZE and reach the
agent's store at MASTER_ADDR:MASTER_PORT. Each test here runs the CLI in a fresh process (the
device count of a process is fixed when its XLA runtime starts).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Writes what the launcher added to its environment, with its argv, to `TAG-RANK.json` next to
#: the base environment (`dump.py BASE TAG`); a file each, since workers' lines interleave.
DUMP = textwrap.dedent(
    """
    import json, os, sys
    base = json.load(open(sys.argv[1]))
    added = {k: v for k, v in os.environ.items() if base.get(k) != v}
    name = f"{sys.argv[2]}-{os.environ.get('RANK')}.json"
    with open(os.path.join(os.path.dirname(sys.argv[1]), name), "w") as out:
        json.dump({"argv": sys.argv, "env": added}, out)
    """
)

#: In the style of torch_xla's test_mp_early_exit.py: refuses to run outside torchrun, joins the
#: `xla` process group through `xla://`, and `torch_xla.launch` (which under torchelastic calls
#: the function with LOCAL_RANK in this process) all-reduces.
EARLY_EXIT_STYLE = textwrap.dedent(
    """
    import os, sys
    import torch
    import torch.distributed as dist
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.xla_backend
    import torch_xla.runtime as xr


    def _mp_fn(index):
        assert index == int(os.environ["LOCAL_RANK"]), (index, os.environ["LOCAL_RANK"])
        dist.init_process_group("xla", init_method="xla://")
        assert dist.get_rank() == int(os.environ["RANK"]) == xr.global_ordinal()
        assert dist.get_world_size() == int(os.environ["WORLD_SIZE"]) == xr.world_size()
        value = torch.tensor([float(dist.get_rank() + 1)], device=torch_xla.device())
        dist.all_reduce(value)
        n = dist.get_world_size()
        total = xm.all_reduce(xm.REDUCE_SUM, value).cpu().item()
        assert total == n * n * (n + 1) / 2, total
        group = os.environ["GROUP_RANK"]
        print(f"rank {dist.get_rank()} of group {group} checked {total:g} as {sys.argv[1:]}")


    if __name__ == "__main__":
        if not dist.is_torchelastic_launched():
            print("Test must be launched with torchrun!", file=sys.stderr)
            sys.exit(1)
        torch_xla.launch(_mp_fn)
        sys.exit(0)
    """
)

#: Every rank reaches the agent's store at MASTER_ADDR:MASTER_PORT as a client
#: (TORCHELASTIC_USE_AGENT_STORE=True), as torch_xla's own `xla://` handler does under torchrun.
AGENT_STORE = textwrap.dedent(
    """
    import datetime, os
    import torch.distributed as dist

    if __name__ == "__main__":
        assert os.environ["TORCHELASTIC_USE_AGENT_STORE"] == "True"
        store = dist.TCPStore(
            os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
            timeout=datetime.timedelta(seconds=120),
        )
        store.set(f"rank{os.environ['RANK']}", os.environ["LOCAL_RANK"])
        seen = [store.get(f"rank{r}").decode() for r in range(int(os.environ["WORLD_SIZE"]))]
        print(f"rank {os.environ['RANK']} read {seen} from the agent store", flush=True)
    """
)

#: Rank 1 exits 3 while the others wait for it in a collective.
ONE_EXITS = textwrap.dedent(
    """
    import os, sys
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm

    if __name__ == "__main__":
        if os.environ["RANK"] == "1":
            sys.exit(3)
        xm.all_reduce(xm.REDUCE_SUM, torch.ones(2, device=torch_xla.device()))
    """
)


def xlasim_run(*args: str, cwd: Path, env: dict | None = None, timeout: float = 400):
    environment = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("XLASIM_", "PJRT_", "CPU_NUM_DEVICES"))
        and k not in ("OMP_NUM_THREADS",)
    }
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])
    )
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "xlasim", "run", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environment,
        timeout=timeout,
    )


def _dumps(directory: Path, tag: str) -> dict[int, dict]:
    found = [json.loads(path.read_text()) for path in directory.glob(f"{tag}-*.json")]
    return {int(d["env"]["RANK"]): d for d in found}


def _normalized(env: dict[str, str]) -> dict[str, str]:
    """What may differ between two launches: the agent's port, its log directory, and `_`
    (the shell's last command)."""
    env = {k: v for k, v in env.items() if k != "_"}
    env["MASTER_PORT"] = "<port>" if env.get("MASTER_PORT", "").isdigit() else "<none>"
    error_file = env.get("TORCHELASTIC_ERROR_FILE", "")
    env["TORCHELASTIC_ERROR_FILE"] = re.sub(
        r"^.*/torchelastic_[^/]+/none_[^/]+/attempt_0/(\d+)/error\.json$", r"<logs>/\1", error_file
    )
    return env


def test_each_rank_gets_the_environment_torchrun_gives_it(tmp_path):
    """The same script under the real `torchrun --nproc-per-node 2` and under
    `xlasim run --devices 2 --torchrun`: every variable torchrun adds, with the same value
    (only the agent's port and log directory differ), and the same argv."""
    script = tmp_path / "dump.py"
    script.write_text(DUMP)
    base = tmp_path / "base.json"
    environment = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    base.write_text(json.dumps(environment))
    torchrun = Path(sys.executable).with_name("torchrun")
    real = subprocess.run(
        [str(torchrun), "--nproc-per-node", "2", "dump.py", str(base), "real"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=environment,
        timeout=300,
    )
    assert real.returncode == 0, real.stderr[-3000:]
    emulated = xlasim_run(
        "--devices", "2", "--torchrun", "dump.py", str(base), "emulated", cwd=tmp_path
    )
    assert emulated.returncode == 0, emulated.stderr[-3000:]
    expected, seen = _dumps(tmp_path, "real"), _dumps(tmp_path, "emulated")
    assert sorted(expected) == sorted(seen) == [0, 1]
    for rank in (0, 1):
        assert seen[rank]["argv"][:2] == expected[rank]["argv"][:2] == ["dump.py", str(base)]
        torchrun_env = _normalized(expected[rank]["env"])
        emulated_env = _normalized(seen[rank]["env"])
        assert {k: emulated_env.get(k) for k in torchrun_env} == torchrun_env


@pytest.mark.parametrize("hosts", [1, 2])
def test_a_script_written_for_torchrun_runs_on_every_rank(tmp_path, hosts):
    """test_mp_early_exit.py's shape: refused without torchrun, checks on 4 ranks with it; on
    2 emulated hosts each is a node of its own (GROUP_RANK, LOCAL_RANK per host), as
    `torchrun --nnodes 2 --node-rank H` on each host gives."""
    script = tmp_path / "early_exit_style.py"
    script.write_text(EARLY_EXIT_STYLE)
    refused = xlasim_run("--devices", "4", str(script), cwd=tmp_path)
    assert refused.returncode == 1
    assert "must be launched with torchrun" in refused.stderr
    report = tmp_path / "report.json"
    done = xlasim_run(
        "--devices",
        "4",
        "--hosts",
        str(hosts),
        "--torchrun",
        str(script),
        "an-arg",
        cwd=tmp_path,
        env={"XLASIM_RUN_REPORT": str(report)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in range(4):
        group = rank // (4 // hosts)
        assert f"rank {rank} of group {group} checked 40 as ['an-arg']" in done.stdout
    counts = json.loads(report.read_text())
    assert counts["status"] == 0 and counts["launches"] == 1
    assert counts["collectives"].get("all_reduce", 0) >= 2


def test_every_rank_reaches_the_agent_store(tmp_path):
    """MASTER_ADDR:MASTER_PORT is a live store that every worker shares, as torchrun's agent
    hosts one; each rank writes a key there and reads every rank's."""
    script = tmp_path / "agent_store.py"
    script.write_text(AGENT_STORE)
    done = xlasim_run("--devices", "2", "--torchrun", str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        assert f"rank {rank} read ['0', '1'] from the agent store" in done.stdout


def test_a_rank_that_exits_nonzero_fails_the_run_and_releases_the_others(tmp_path):
    """As torchrun: one worker's non-zero exit fails the job (exit status 1), named by rank and
    status; the ranks waiting for it are released, not left to hang."""
    script = tmp_path / "one_exits.py"
    script.write_text(ONE_EXITS)
    done = xlasim_run(
        "--devices", "4", "--torchrun", str(script), cwd=tmp_path, env={"XLASIM_TIMEOUT": "120"}
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert re.search(r"rank 1\b.*exit(ed with)? status 3", done.stderr), done.stderr[-3000:]
    assert "timed out" not in done.stderr.lower()


def test_threads_mode_is_refused_with_the_reason(tmp_path):
    """torchrun gives every rank a process (and its own os.environ): ranks that are threads of
    one process cannot each see their own RANK."""
    script = tmp_path / "dump.py"
    script.write_text(DUMP)
    done = xlasim_run(
        "--devices", "2", "--processes", "1", "--torchrun", str(script), "x", cwd=tmp_path
    )
    assert done.returncode == 2
    assert "--torchrun" in done.stderr and "one process per core" in done.stderr
    assert "Traceback" not in done.stderr
