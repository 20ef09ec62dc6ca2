"""An IDE's debugger (debugpy, as VS Code and PyCharm run it) stops at a breakpoint in rank code
(docs/debugging.md, "An IDE's debugger"): pytest runs under `python -m debugpy --listen`, and
this test is the IDE, speaking the Debug Adapter Protocol over the socket, as VS Code does: it
sets a breakpoint in a rank's test body, waits for the stop, reads a rank-local, holds the rank
while the others wait in a collective and continues; the test passes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import xlasim

pytest.importorskip("debugpy")

REPO = Path(xlasim.__file__).resolve().parents[1]

TESTS = """
import pytest
import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr


@pytest.mark.xla
def test_stops_on_rank_3():
    secret = xr.global_ordinal() * 10
    n = xr.world_size()  # the breakpoint: line 12, on rank 3 only
    rank = torch.tensor([float(xr.global_ordinal())], device=torch_xla.device())
    assert xm.all_reduce(xm.REDUCE_SUM, rank).item() == n * (n - 1) / 2
"""
BREAKPOINT_LINE = 12


class Ide:
    """The client side of the Debug Adapter Protocol: requests, their responses, events."""

    def __init__(self, port: int, bound: float):
        deadline = time.monotonic() + bound
        while True:
            try:
                self._socket = socket.create_connection(("127.0.0.1", port), timeout=bound)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self._buffer = b""
        self._seq = 0
        self.events: list[dict[str, Any]] = []

    def send(self, command: str, **arguments: Any) -> int:
        """Send a request; its number, for `response`."""
        self._seq += 1
        body = json.dumps(
            {"seq": self._seq, "type": "request", "command": command, "arguments": arguments}
        ).encode()
        self._socket.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        return self._seq

    def response(self, seq: int) -> dict[str, Any]:
        """Wait for the response to request `seq` (events meanwhile are kept)."""
        return self._until(lambda m: m["type"] == "response" and m["request_seq"] == seq)

    def request(self, command: str, **arguments: Any) -> dict[str, Any]:
        """Send a request and wait for its response."""
        return self.response(self.send(command, **arguments))

    def event(self, name: str) -> dict[str, Any]:
        """The first event `name` not yet taken (waiting for it; the debuggee's end instead
        fails)."""
        for index, message in enumerate(self.events):
            if message.get("event") == name:
                return self.events.pop(index)
        found = self._until(lambda m: m.get("event") in (name, "terminated"))
        assert found["event"] == name, f"the debuggee ended before a {name!r} event"
        return found

    def _until(self, wanted: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        while True:
            message = self._read()
            if wanted(message):
                return message
            if message["type"] == "event":
                self.events.append(message)

    def close(self) -> None:
        """Disconnect, as an IDE does when the debuggee ends (debugpy's adapter then exits)."""
        self._socket.close()

    def _read(self) -> dict[str, Any]:
        while b"\r\n\r\n" not in self._buffer:
            self._receive()
        head, self._buffer = self._buffer.split(b"\r\n\r\n", 1)
        length = int(head.split(b":")[1])
        while len(self._buffer) < length:
            self._receive()
        body, self._buffer = self._buffer[:length], self._buffer[length:]
        return json.loads(body)

    def _receive(self) -> None:
        chunk = self._socket.recv(65536)
        if not chunk:
            raise EOFError("the debug adapter closed the connection")
        self._buffer += chunk


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_debugpy_stops_at_a_breakpoint_in_rank_code_with_ranks_as_threads(tmp_path):
    (tmp_path / "test_ranks.py").write_text(TESTS)
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("XLASIM_")}
    # The IDE session's setting besides --xla-processes=1: a collective bound longer than a
    # person's look. debugpy's stop does not reach ranks already waiting in the collective, whose
    # bound fires at the default (docs/debugging.md, "An IDE's debugger"; CI saw it at 2 s).
    environment.update(
        PYTHONPATH=str(REPO), XLASIM_TIMEOUT="600", PYDEVD_DISABLE_FILE_VALIDATION="1"
    )
    command = [sys.executable, "-m", "debugpy", "--listen", f"127.0.0.1:{port}"]
    command += ["--wait-for-client", "-m", "pytest", "-p", "no:cacheprovider", "-q"]
    command += ["--xla-devices=8", "--xla-processes=1", "test_ranks.py"]
    printed = tmp_path / "printed.txt"
    with printed.open(
        "wb"
    ) as sink:  # not a pipe: debugpy's adapter inherits it and outlives pytest
        pytest_run = subprocess.Popen(
            command, cwd=tmp_path, env=environment, stdout=sink, stderr=subprocess.STDOUT
        )
    try:
        ide = Ide(port, bound=60)
        ide.request("initialize", adapterID="debugpy", linesStartAt1=True, pathFormat="path")
        attach = ide.send("attach", justMyCode=False)  # answered after configurationDone
        ide.event("initialized")
        source = {"path": str(tmp_path / "test_ranks.py")}
        where = [{"line": BREAKPOINT_LINE, "condition": "secret == 30"}]
        assert ide.request("setBreakpoints", source=source, breakpoints=where)["success"]
        ide.request("configurationDone")
        assert ide.response(attach)["success"]
        stopped = ide.event("stopped")["body"]
        frames = ide.request("stackTrace", threadId=stopped["threadId"])["body"]["stackFrames"]
        assert (frames[0]["name"], frames[0]["line"]) == ("test_stops_on_rank_3", BREAKPOINT_LINE)
        value = ide.request("evaluate", expression="secret", frameId=frames[0]["id"])
        assert value["body"]["result"] == "30"
        time.sleep(3)  # held, the other ranks waiting in the all_reduce
        ide.request("continue", threadId=stopped["threadId"])
        ide.close()
        pytest_run.wait(timeout=120)
    except Exception as error:
        pytest_run.kill()
        pytest_run.wait()
        raise AssertionError(f"{error!r}; pytest printed:\n{printed.read_text()}") from error
    text = printed.read_text()
    assert pytest_run.returncode == 0, text
    assert "1 passed" in text
