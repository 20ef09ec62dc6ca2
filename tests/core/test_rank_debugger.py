"""A rank's debugger (docs/debugging.md): pdb in the rank, served at the launching process's
terminal one session at a time, every bound standing still meanwhile.

The terminal here is a script (`Scripted`): it answers each prompt as a person would, and can
take its time. The pseudo-terminal runs, through pytest and `xlasim run`, are in
tests/plugin/test_plugin_debugging.py.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import torch
import torch.distributed as dist
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_backend
import torch_xla.runtime as xr

import xlasim
from xlasim.base import debugger_clock
from xlasim.base.topology import Topology
from xlasim.ranks.world import World
from xlasim.reports import debugger_desk, rank_debugger
from xlasim.reports.debugger_desk import CONTINUE, DECLINED, EOF, POST_MORTEM, Desk, Request


class Scripted:
    """A terminal whose person answers `respond(prompt, what was shown)`, after `hold` s."""

    def __init__(self, respond: Callable[[str, str], str], hold: float = 0.0):
        self.respond, self.hold = respond, hold
        self.shown: list[str] = []
        self.prompts: list[str] = []

    @property
    def text(self) -> str:
        return "".join(self.shown)

    def opened(self, request: Request, again: bool) -> None:
        self.shown.append(f"\n<open {request.label} {request.kind}>\n{request.preamble}")

    def write(self, text: str) -> None:
        self.shown.append(text)

    def readline(self, prompt: str) -> str:
        self.prompts.append(prompt)
        time.sleep(self.hold)
        answer = self.respond(prompt, self.text)
        self.shown.append(prompt + answer + "\n")
        if answer == "^C":
            raise KeyboardInterrupt
        return answer + "\n"

    def closed(self, request: Request, note: str, last: bool) -> None:
        self.shown.append(f"{note}<closed {request.label} {request.end}>\n")

    def idle(self) -> None:
        self.shown.append("<idle>\n")

    def interrupted(self, request: Request) -> BaseException:
        return KeyboardInterrupt()


@pytest.fixture
def terminal() -> Iterator[Callable[..., Scripted]]:
    """Serve ranks' debuggers at a scripted terminal (this process's own again after)."""

    def use(respond: Callable[[str, str], str], hold: float = 0.0) -> Scripted:
        scripted = Scripted(respond, hold)
        debugger_desk.use_terminal(scripted)
        return scripted

    yield use
    debugger_desk.use_terminal(None)
    assert not debugger_clock.paused()


@pytest.fixture(scope="module")
def isolated(world) -> Iterator[World]:
    """8 cores in 4 worker processes on 2 emulated hosts, a 1 s collective bound."""
    isolated = World(Topology(8, processes=4, hosts=2), collective_timeout=1.0)
    yield isolated
    isolated.close()


def ask_then_continue(*commands: str) -> Callable[[str, str], str]:
    """Each session of the run: `commands` in turn, then `c`."""
    asked: dict[str, int] = {}

    def respond(prompt: str, shown: str) -> str:
        count = asked[prompt] = asked.get(prompt, 0) + 1
        return commands[count - 1] if count <= len(commands) else "c"

    return respond


def total() -> float:
    rank = xr.global_ordinal()
    return xm.all_reduce(xm.REDUCE_SUM, torch.tensor([float(rank)], device=torch_xla.device()))


def stop_on_rank_3(rank: int) -> float:
    secret = rank * 10
    if secret == 30:
        breakpoint()
    return total().item()


def every_rank_total(rank: int) -> float:
    return total().item()


def stop_on_ranks_2_and_5(rank: int) -> float:
    mine = f"local of rank {rank}"
    if rank in (2, 5):
        import pdb

        pdb.set_trace()
    return total().item() if mine else 0.0


# ---------------------------------------------------------------------- the clock and the desk


def test_the_clock_stands_still_while_a_debugger_is_open():
    before = debugger_clock.now()
    debugger_clock.pause()
    debugger_clock.pause()  # two sessions
    frozen = debugger_clock.now()
    time.sleep(0.2)
    assert debugger_clock.now() == frozen and debugger_clock.paused()
    debugger_clock.resume()
    time.sleep(0.05)
    assert debugger_clock.now() == frozen  # one session is still open
    debugger_clock.resume()
    time.sleep(0.05)
    assert not debugger_clock.paused()
    assert 0.04 < debugger_clock.now() - frozen < 0.2
    assert frozen - before < 0.05


def test_the_desk_serves_one_session_at_a_time_and_declines_a_second_post_mortem(terminal):
    scripted = terminal(lambda prompt, shown: "c")
    desk = Desk()
    replies: list[tuple[int, object]] = []
    asks = [
        Request(3, 8, POST_MORTEM, "> frame of 3\n", "(Pdb rank 3/8) ", preamble="Trace 3\n"),
        Request(5, 8, POST_MORTEM, "> frame of 5\n", "(Pdb rank 5/8) ", preamble="Trace 5\n"),
        Request(3, 8, POST_MORTEM, "", None, end=CONTINUE),
    ]
    for request in asks:
        desk.submit(request, lambda reply, rank=request.rank: replies.append((rank, reply)))
    assert debugger_clock.paused()
    assert desk.serve() is None
    assert replies == [(3, "c\n"), (5, DECLINED), (3, None)]
    assert "Trace 5" not in scripted.text and "Trace 3" in scripted.text
    assert "rank 5 of 8 failed too" in scripted.text
    assert scripted.text.endswith("<closed rank 3/8 continue>\n<idle>\n")
    assert not debugger_clock.paused()


def test_ctrl_c_at_a_prompt_answers_every_rank_and_raises(terminal):
    terminal(lambda prompt, shown: "^C")
    desk = Desk()
    replies: list[object] = []
    for rank in (1, 2):
        desk.submit(Request(rank, 4, "set_trace", "", f"(Pdb rank {rank}/4) "), replies.append)
    with pytest.raises(KeyboardInterrupt):
        desk.serve()
    assert replies == [EOF, EOF]
    desk.submit(Request(3, 4, "set_trace", "", "(Pdb rank 3/4) "), replies.append)
    assert replies[-1] == EOF  # closed: at once
    assert not debugger_clock.paused()


# ---------------------------------------------------------------------- ranks that stop


@pytest.mark.parametrize("mode", ["threads", "isolated"])
def test_a_breakpoint_held_three_times_the_collective_timeout_then_continued_passes(
    mode, world, isolated, terminal
):
    on = world if mode == "threads" else isolated
    saved = on.collective_timeout
    on.collective_timeout = 1.0
    scripted = terminal(ask_then_continue("p secret", "p rank"), hold=1.1)  # 3.3 s in all
    try:
        started = time.monotonic()
        results = on.run(stop_on_rank_3, timeout=2.0)  # the run's own bound stands still too
    finally:
        on.collective_timeout = saved
    assert time.monotonic() - started > 3.3
    assert results == [28.0] * 8
    assert scripted.prompts == ["(Pdb rank 3/8) "] * 3
    assert "p secret\n30\n" in scripted.text and "p rank\n3\n" in scripted.text
    assert re.search(
        r"<open rank 3/8 set_trace>\n> \S+test_rank_debugger\.py\(\d+\)stop_on_rank_3\(\)\n"
        r"-> return total\(\)\.item\(\)\n\(Pdb rank 3/8\) p secret\n30\n",
        scripted.text,
    )


@pytest.mark.parametrize("mode", ["threads", "isolated"])
def test_two_ranks_at_breakpoints_are_served_in_turn(mode, world, isolated, terminal):
    on = world if mode == "threads" else isolated
    scripted = terminal(ask_then_continue("p mine"))
    assert on.run(stop_on_ranks_2_and_5) == [28.0] * 8
    opened = re.findall(r"<open (rank \d/8) set_trace>", scripted.text)
    assert sorted(opened) == ["rank 2/8", "rank 5/8"]
    first = scripted.text.split("<closed")[0]  # one whole session before the other opens
    assert first.count("p mine") == 1 and opened[0] in first
    for rank in (2, 5):
        assert f"(Pdb rank {rank}/8) p mine\n'local of rank {rank}'\n" in scripted.text


def distributed_breakpoint(rank: int) -> int:
    dist.init_process_group("xla", init_method="xla://")
    try:
        seen = rank * 100
        dist.breakpoint(rank=6)
        return seen
    finally:
        dist.destroy_process_group()


def test_torch_distributed_breakpoint_stops_only_its_rank(isolated, terminal):
    scripted = terminal(ask_then_continue("up", "p seen"))
    assert isolated.run(distributed_breakpoint) == [r * 100 for r in range(8)]
    assert scripted.prompts == ["(Pdb rank 6/8) "] * 3
    assert "Type 'up' to get to the frame that called dist.breakpoint(rank=6)" in scripted.text
    assert "p seen\n600\n" in scripted.text


def fails_on_ranks_2_and_6(rank: int) -> None:
    secret = rank * 10
    try:
        if secret in (20, 60):
            time.sleep(0.3 * (rank == 6))  # rank 2 fails first
            raise ValueError(f"rank {rank} is wrong")
        total()
    except ValueError as error:
        rank_debugger.post_mortem(error)
        raise


@pytest.mark.parametrize("mode", ["threads", "isolated"])
def test_a_post_mortem_opens_in_the_first_failing_rank(mode, world, isolated, terminal):
    on = world if mode == "threads" else isolated
    hold = threading.Event()

    def respond(prompt: str, shown: str) -> str:
        if not hold.is_set():  # rank 6 fails while rank 2 is in its post-mortem
            hold.set()
            time.sleep(0.8)
            return "p secret"
        return "c"

    scripted = terminal(respond)
    with pytest.raises(xlasim.RankFailedError) as caught:
        on.run(fails_on_ranks_2_and_6)
    assert caught.value.ranks == [2, 6]
    assert scripted.prompts == ["(Pdb rank 2/8) "] * 2
    assert "ValueError: rank 2 is wrong" in scripted.text and "p secret\n20\n" in scripted.text
    assert "rank 6 of 8 failed too" in scripted.text
    assert on.run(every_rank_total) == [28.0] * 8  # the world serves the next run


@pytest.mark.parametrize("mode", ["threads", "isolated"])
def test_ctrl_c_at_a_rank_prompt_ends_the_run_and_the_world_serves_the_next(
    mode, world, isolated, terminal
):
    on = world if mode == "threads" else isolated
    terminal(lambda prompt, shown: "^C")
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        on.run(stop_on_rank_3)
    assert time.monotonic() - started < 10
    terminal(ask_then_continue())
    assert on.run(every_rank_total) == [28.0] * 8
