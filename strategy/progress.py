"""Training progress, printed by global rank 0 only: one line per logged step, one per validation.

Plain lines rather than a redrawn bar, so that progress stays readable in CI logs and in the
output pytest captures.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Prints `epoch e | step s/total [bar] loss x | n steps/s` lines when enabled (without
    total and bar when the number of steps is not known)."""

    def __init__(self, total_steps: int | None, enabled: bool, stream: TextIO | None = None):
        self.total_steps = total_steps
        self.enabled = enabled
        self.stream = stream or sys.stdout
        self._first: tuple[int, float] | None = None  # first logged (step, time): rate baseline

    def _print(self, line: str) -> None:
        if self.enabled:
            print(line, file=self.stream, flush=True)

    def message(self, text: str) -> None:
        self._print(text)

    def step(self, epoch: int, step: int, loss: float, width: int = 20) -> None:
        now = time.monotonic()
        rate = ""
        if self._first is None:
            self._first = (step, now)
        elif now > self._first[1]:
            rate = f" | {(step - self._first[0]) / (now - self._first[1]):.1f} steps/s"
        where = f"step {step}"
        if self.total_steps:
            filled = min(width, width * step // self.total_steps)
            where = (
                f"step {step:>{len(str(self.total_steps))}}/{self.total_steps} "
                f"[{'#' * filled}{'.' * (width - filled)}]"
            )
        self._print(f"epoch {epoch} | {where} loss {loss:.4f}{rate}")

    def validation(self, epoch: int, loss: float) -> None:
        self._print(f"epoch {epoch} | validation loss {loss:.4f}")
