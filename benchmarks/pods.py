"""What a pod across machines costs (issue 28), on machines simulated by network namespaces
(fixtures/namespaces.py; needs root or CAP_NET_ADMIN, else a note says why it was not measured).

- all_reduce of 4 KB and 16 MB across 2 machines (2 emulated hosts of one chip, one on each),
  median per call, against plain torch.distributed gloo between the same two namespaces, back
  to back in the same run (pod_worker.py);
- memory per machine: the peak PSS of every process in a machine's namespace while the same
  8-host slice runs the same program (every rank holding `STATE_MIB` of device tensors, as a
  model's state would), on one machine against 4 machines of 2 hosts each. A machine's fixed
  part (the launching process and the zygote, torch and torch_xla imported) does not shrink
  with M; the ranks' part does.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from pytest_runs import REPO

sys.path.insert(0, str(REPO))
from fixtures.namespaces import Machines, unavailable

WORKER = Path(__file__).parent / "pod_worker.py"
REPEATS = 20
STATE_MIB = 256
PORT = 29780
BOUND_S = 600.0
Record = dict


def records(notes: list[str], progress) -> list[Record]:
    reason = unavailable()
    if reason is not None:
        notes.append(f"pods: not measured: {reason}")
        return []
    machines = Machines(4)
    try:
        progress("pods: all_reduce across 2 namespaced machines, then gloo between them")
        found = _collectives(machines)
        progress("pods: memory of an 8-host slice on 1 machine, then on 4")
        found.append(_memory(machines))
        return found
    except Exception as error:
        notes.append(f"pods: {error}")
        return []
    finally:
        machines.close()


def _run(machines: Machines, commands: dict[int, list[str]], name: str, **env: str) -> dict:
    """Run a command on each machine; their outputs, and each machine's peak PSS (bytes)."""
    folder = machines.root / name
    folder.mkdir()
    started = {
        m: machines.start(m, command, folder / f"m{m}", **env) for m, command in commands.items()
    }
    peaks = dict.fromkeys(commands, 0)
    deadline = time.monotonic() + BOUND_S
    while any(p.poll() is None for p in started.values()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not finish within {BOUND_S:g} s")
        for m in commands:
            peaks[m] = max(peaks[m], sum(_pss(pid) for pid in machines.pids(m)))
        time.sleep(0.25)
    for m, process in started.items():
        if process.returncode != 0:
            err = Path(f"{folder}/m{m}.err").read_text()[-3000:]
            raise RuntimeError(f"{name} machine {m} exited {process.returncode}: {err}")
    outputs = {m: Path(f"{folder}/m{m}.out").read_text() for m in commands}
    return {"outputs": outputs, "peaks": peaks}


def _pod(machines: Machines, count: int, slice_: list[str], *script: str) -> dict[int, list]:
    return {
        m: [
            *[sys.executable, "-m", "xlasim", "run", *slice_],
            *["--machines", str(count), "--machine-rank", str(m), "--token", "bench"],
            *["--rendezvous", f"{machines.address(0)}:{PORT}", *script],
        ]
        for m in range(count)
    }


def _collectives(machines: Machines) -> list[Record]:
    slice_ = ["--devices", "2", "--processes", "2", "--hosts", "2"]
    pod = _run(
        machines, _pod(machines, 2, slice_, str(WORKER), "xlasim", str(REPEATS)), "pod-bench"
    )
    gloo = _run(
        machines,
        {
            m: [
                sys.executable,
                str(WORKER),
                "gloo",
                str(m),
                f"{machines.address(0)}:{PORT + 1}",
                str(REPEATS),
            ]
            for m in range(2)
        },
        "gloo-bench",
        GLOO_SOCKET_IFNAME="eth0",
    )
    times = {}
    for run in (pod, gloo):
        for line in run["outputs"][0].splitlines():
            if line.startswith("{"):
                record = json.loads(line)
                times[(record["peer"], record["bytes"])] = record["seconds"]
    found = []
    for nbytes in sorted({b for _, b in times}):
        xlasim_s, gloo_s = times[("xlasim", nbytes)], times[("gloo", nbytes)]
        found.append(
            {
                "op": "pod_all_reduce",
                "mode": "isolated",
                "devices": 2,
                "machines": 2,
                "bytes": nbytes,
                "xlasim_s": xlasim_s,
                "gloo_s": gloo_s,
                "pod_over_gloo": xlasim_s / gloo_s,
            }
        )
    return found


def _memory(machines: Machines) -> Record:
    slice_ = ["--devices", "8", "--processes", "8", "--hosts", "8"]
    script = [str(WORKER), "memory", str(STATE_MIB)]
    one = _run(
        machines, {0: [sys.executable, "-m", "xlasim", "run", *slice_, *script]}, "memory-one"
    )
    four = _run(machines, _pod(machines, 4, slice_, *script), "memory-four")
    per_machine = max(four["peaks"].values())
    return {
        "op": "pod_memory",
        "mode": "isolated",
        "devices": 8,
        "machines": 4,
        "state_bytes_per_rank": STATE_MIB << 20,
        "one_machine_pss_bytes": one["peaks"][0],
        "pod_machine_pss_bytes": per_machine,
        "machine_over_one": per_machine / one["peaks"][0],
    }


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def lines(records: list[Record]) -> list[str]:
    """The pod figures, for the report's end."""
    out = []
    for r in records:
        if r["op"] == "pod_all_reduce":
            out.append(
                f"pod all_reduce {r['bytes']} B across 2 machines: {r['xlasim_s'] * 1e3:.2f} ms, "
                f"gloo {r['gloo_s'] * 1e3:.2f} ms ({r['pod_over_gloo']:.2f}x)"
            )
        elif r["op"] == "pod_memory":
            out.append(
                f"pod memory, 8 hosts, {r['state_bytes_per_rank'] >> 20} MiB of state per rank: "
                f"{r['pod_machine_pss_bytes'] / 2**20:.0f} MiB per machine of 4 against "
                f"{r['one_machine_pss_bytes'] / 2**20:.0f} MiB on one ({r['machine_over_one']:.2f}x)"
            )
    return out


if __name__ == "__main__":  # the pod figures alone: python benchmarks/pods.py
    found_notes: list[str] = []
    found = records(found_notes, lambda message: print(message, file=sys.stderr))
    print("\n".join(lines(found) + found_notes))
    print(json.dumps(found, indent=1))
