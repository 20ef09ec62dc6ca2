"""The clock of every bound on ranks: it stands still while a rank is stopped in a debugger.

A rank at a `breakpoint()` or in a post-mortem waits for a person, and its peers wait for it;
neither is a hang. So the collective timeout, the deadlock check, the bound of a whole run and
the grace given to released ranks are measured on this clock, not on `time.monotonic()`: it
is monotonic time minus the time any debugger of this process's ranks was open (the debugger
desk, `xlasim.reports.debugger_desk`, pauses and resumes it). Waits started before a pause
end as much later as the pause lasted.
"""

from __future__ import annotations

import threading
import time

_lock = threading.Lock()
#: Debugger sessions open now (the clock stands still while any is).
_holders = 0
#: Seconds the clock stood still, in pauses that are over.
_stood_still = 0.0
#: When the current pause began (monotonic), while one lasts.
_since = 0.0


def now() -> float:
    """Monotonic seconds, not counting the time any rank was stopped in a debugger."""
    with _lock:
        if _holders:
            return _since - _stood_still
        return time.monotonic() - _stood_still


def paused() -> bool:
    """Whether a rank of this process's worlds is stopped in a debugger now."""
    return _holders > 0


def pause() -> None:
    """A debugger session opened: the clock stands still until every session is over."""
    global _holders, _since
    with _lock:
        if _holders == 0:
            _since = time.monotonic()
        _holders += 1


def resume() -> None:
    """A debugger session ended: the clock goes on when it was the last one."""
    global _holders, _stood_still
    with _lock:
        if _holders == 0:
            return
        _holders -= 1
        if _holders == 0:
            _stood_still += time.monotonic() - _since
