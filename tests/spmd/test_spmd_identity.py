"""SPMD code sees the preset's TPU slice: device attributes, and the meshes torch_xla builds.

Each check runs in a fresh process (`xlasim.spmd.start_world`, as the plugin's SPMD worker
does): SPMD and the device count are for the life of a process. The expected meshes are
derived here from the layout docs/spmd.md gives for the preset, not read from the output.
"""

import json
import os
import subprocess
import sys
import textwrap

#: docs/spmd.md: "2xv5e-8" is two v5e-8 slices; devices 8s..8s+7 are slice s; a v5e-8 slice's
#: 8 chips (one TensorCore each) form a 2 x 4 grid, x fastest: device 8s + k at (k % 2, k // 2).
SLICES, PER_SLICE, X, Y = 2, 8, 2, 4


def documented_device(slice_index: int, x: int, y: int) -> int:
    """The device at chip (x, y) of a slice, inverting the documented layout."""
    (k,) = [k for k in range(PER_SLICE) if (k % X, k // X) == (x, y)]
    return slice_index * PER_SLICE + k


def in_spmd_world(topology: str, devices: int, body: str) -> object:
    """Run `body` (which sets `result`) in a fresh SPMD world of the preset; return `result`."""
    code = (
        textwrap.dedent(
            f"""
        import json
        import numpy as np
        import torch_xla.distributed.spmd as xs
        import torch_xla.runtime as xr
        from xlasim import spmd
        from xlasim.base.topology import preset

        assert spmd.start_world(preset({topology!r}), {devices}) == {devices}
        """
        )
        + textwrap.dedent(body)
        + "\nprint('RESULT', json.dumps(result))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stderr[-3000:]
    line = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :])


def test_multislice_hybrid_mesh() -> None:
    got = in_spmd_world(
        "2xv5e-8",
        16,
        """
        def ids(mesh):
            return mesh.device_ids.reshape(mesh.mesh_shape).tolist()

        result = {
            "attributes": xr.global_runtime_device_attributes(),
            "rows": ids(xs.HybridMesh(ici_mesh_shape=(2, 4), dcn_mesh_shape=(2, 1))),
            "columns": ids(xs.HybridMesh(ici_mesh_shape=(4, 2), dcn_mesh_shape=(1, 2))),
            "flat": ids(xs.get_1d_mesh("data")),
        }
        """,
    )
    # Slices stacked along the DCN axis; within a slice the logical axes follow the physical
    # ones of the same size (2 -> x, 4 -> y), as on a real two-slice v5e pod.
    assert got["rows"] == [
        [documented_device(s, x, y) for y in range(Y)] for s in range(SLICES) for x in range(X)
    ]
    assert got["columns"] == [
        [documented_device(s, x, y) for s in range(SLICES) for x in range(X)] for y in range(Y)
    ]
    for device, attributes in enumerate(got["attributes"]):
        slice_index, k = divmod(device, PER_SLICE)
        assert attributes == {
            "coords": [k % X, k // X, 0],
            "core_on_chip": 0,
            "num_cores": 1,
            "name": f"TPU:{device}",
            "slice_index": slice_index,
            "num_slices": SLICES,
        }
    assert got["flat"] == list(range(SLICES * PER_SLICE))


def test_single_slice_refuses_dcn() -> None:
    """One slice has no slice_index: torch_xla refuses a DCN axis, as on a single TPU slice."""
    got = in_spmd_world(
        "v5e-8",
        8,
        """
        try:
            xs.HybridMesh(ici_mesh_shape=(4, 1), dcn_mesh_shape=(2, 1))
            result = "built"
        except ValueError as error:
            result = str(error)
        """,
    )
    assert got == "Invalid dcn_mesh_shape for single slice mesh"


def test_each_slice_of_a_multislice_is_its_own_cloud_tpu_slice() -> None:
    """Every host of "2xv5e-8" is the one host of a v5e-8 slice: its own accelerator type,
    bounds and worker id 0, as Cloud TPU's metadata gives each slice of a multislice."""
    from xlasim.base.identity import Identity
    from xlasim.base.topology import PRESETS

    identity = Identity.of(PRESETS["2xv5e-8"][0])
    for host in (0, 1):
        assert identity.tpu_env(host) == {
            "ACCELERATOR_TYPE": "v5litepod-8",
            "TPU_PROCESS_BOUNDS": "1,1,1",
            "TPU_CHIPS_PER_PROCESS_BOUNDS": f"{X},{Y},1",
            "WORKER_ID": "0",
        }
    assert identity.worker_hostnames() == ["127.0.0.1", "127.0.0.2"]
    assert "slice_index" not in Identity.of(PRESETS["v5e-8"][0]).device_attributes(0)


def test_a_pod_host_branch_runs_as_each_host() -> None:
    """`xlasim.spmd.as_host(h)`: the one process of an emulated pod's SPMD program answers the
    process queries and the TPU metadata as host h's process would, for the code that branches
    on the host (each host loading its half of the global batch here); the program stays the
    pod's."""
    got = in_spmd_world(
        "v4-16",
        8,
        """
        import torch
        import torch_xla
        import torch_xla._internal.tpu as tpu
        import xlasim

        def me():
            return [xr.process_index(), xr.host_index(), xr.process_count(), tpu.worker_id()]

        GLOBAL = torch.arange(32.0).reshape(8, 4)

        def this_hosts_rows():
            per_host = GLOBAL.shape[0] // xr.process_count()
            return GLOBAL[xr.process_index() * per_host : (xr.process_index() + 1) * per_host]

        hosts, parts = [], []
        for host in spmd.hosts():
            with spmd.as_host(host):
                hosts.append(me())
                parts.append(this_hosts_rows())
        batch = torch.cat(parts).to(torch_xla.device())
        xs.mark_sharding(batch, xs.get_1d_mesh("data"), ("data", None))
        refused = []
        for misuse in ((2,), (-1,), (0, 1)):
            try:
                with spmd.as_host(misuse[0]):
                    if len(misuse) > 1:
                        with spmd.as_host(misuse[1]):
                            pass
            except xlasim.XlasimError as error:
                refused.append(str(error))
        result = {
            "outside": me(),
            "hosts": hosts,
            "batch": (batch * 2).cpu().tolist(),
            "refused": refused,
        }
        """,
    )
    # v4-16: 2 hosts of one slice, worker ids 0 and 1; the pod is one process outside the block.
    assert got["outside"] == [0, 0, 1, 0]
    assert got["hosts"] == [[0, 0, 2, 0], [1, 1, 2, 1]]
    assert got["batch"] == [[2.0 * (4 * row + col) for col in range(4)] for row in range(8)]
    assert len(got["refused"]) == 3
    assert all("can act for hosts 0..1 only" in refused for refused in got["refused"][:2])
    assert "inside as_host(0)" in got["refused"][2]


def test_elsewhere_a_process_acts_for_its_own_host_only() -> None:
    """Natively (a TPU VM: one process per host) and outside an SPMD world `as_host` serves the
    process's own host, unchanged, so the same test loop runs there; another host is refused."""
    code = textwrap.dedent(
        """
        import torch_xla.runtime as xr
        from xlasim import XlasimError, spmd

        assert list(spmd.hosts()) == [0]
        with spmd.as_host(0):
            assert (xr.process_index(), xr.process_count()) == (0, 1)
        try:
            with spmd.as_host(1):
                pass
        except XlasimError as error:
            print("REFUSED", error)
        """
    )
    env = {**os.environ, "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "REFUSED xlasim.spmd.as_host(1): this process can act for hosts 0 only" in done.stdout
