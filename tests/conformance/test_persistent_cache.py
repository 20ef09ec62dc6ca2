"""torch_xla's persistent compilation cache writes entries on the CPU client but never loads one.

`xr.initialize_cache(dir)` (`XLA_PERSISTENT_CACHE_PATH`) serializes each compiled executable to a
file named by the graph's hash; a later process finding that file asks the client to deserialize
it. torch_xla 2.9.0's `PjRtComputationClient::DeserializeComputation` calls
`DeserializeExecutable`, which XLA's CPU client leaves unimplemented ("Deserializing serialized
executable not supported"): the load fails, the entry is erased, the graph is compiled again and
written again. This is why emulated ranks cannot share their compilations through that cache
(docs/compilation.md). These tests hold torch_xla alone, no xlasim: when a torch_xla release
loads entries on the CPU client, they fail, and sharing compilations across rank processes
becomes possible.
"""

import json
import os
import subprocess
import sys

#: A fresh process compiling one small graph, reporting torch_xla's persistent-cache counters.
PROGRAM = """
import json
import torch
import torch_xla
import torch_xla.debug.metrics as met

x = torch.arange(6.0).to(torch_xla.device())
value = (x * 2).sum().item()
names = ("UncachedCompile", "PersistentCacheHit", "PersistentCacheMiss",
         "PersistentCacheDeserializeFailure")
print("@@" + json.dumps({"value": value, **{n: met.counter_value(n) or 0 for n in names}}))
"""


def _compile_in_fresh_process(cache_dir) -> tuple[dict, str]:
    """One native CPU process with the persistent cache at `cache_dir`: its counters, its log."""
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("XLASIM_", "PJRT_", "CPU_"))},
        "PJRT_DEVICE": "CPU",
        "CPU_NUM_DEVICES": "1",
        "XLA_PERSISTENT_CACHE_PATH": str(cache_dir),
    }
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        capture_output=True,
        text=True,
        timeout=180,
        env=environment,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("@@")]
    return json.loads(line[2:]), done.stderr


def test_the_cpu_client_writes_entries_it_cannot_load(tmp_path):
    cache = tmp_path / "cache"
    first, _ = _compile_in_fresh_process(cache)
    written = {entry.name: entry.stat().st_mtime_ns for entry in cache.iterdir()}
    assert first["value"] == 30.0
    assert first["UncachedCompile"] == 1 and first["PersistentCacheMiss"] == 1
    assert len(written) == 1, "one graph, one entry"

    second, log = _compile_in_fresh_process(cache)
    assert second["value"] == 30.0
    # The entry was found (no miss) but could not be loaded: compiled again, entry rewritten.
    assert second["PersistentCacheMiss"] == 0
    assert second["PersistentCacheDeserializeFailure"] == 1
    assert second["PersistentCacheHit"] == 0
    assert second["UncachedCompile"] == 1
    assert "Deserializing serialized executable not supported" in log
    rewritten = {entry.name: entry.stat().st_mtime_ns for entry in cache.iterdir()}
    assert rewritten.keys() == written.keys(), "the same graph hashes to the same entry"
    assert all(rewritten[name] > written[name] for name in written)
