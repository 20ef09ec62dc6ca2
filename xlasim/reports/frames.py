"""Which frames of a rank's traceback are the user's: the one place tracebacks are trimmed.

A rank's exception passes through xlasim's own frames (the rank thread, the launch wrappers,
the plugin's job runner) before it reaches the user's code, and may be raised in xlasim's
frames the user's code called into (an emulated collective refusing its arguments). Reports
start at the first frame of the user's code, as pytest's start at the test, and show the user's
frames only: on a TPU the same call fails at the same user line. An exception with no user
frame at all was raised by xlasim's own call of the function (arguments that do not fit it),
which is itself worth knowing (`has_user_frames`).
"""

from __future__ import annotations

import os
import traceback
from pathlib import Path
from types import TracebackType

#: xlasim's own source directory (the package, every layer of it): frames in it are the
#: emulator's, not the user's.
PACKAGE_DIR = str(Path(__file__).resolve().parents[1]) + os.sep


def is_own(filename: str) -> bool:
    """Whether a frame of this file is xlasim's own."""
    return filename.startswith(PACKAGE_DIR)


def first_user(tb: TracebackType | None) -> TracebackType | None:
    """The traceback from the first frame outside xlasim on (None when every frame is xlasim's)."""
    while tb is not None and is_own(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return tb


def user_traceback(error: BaseException) -> str:
    """`error` formatted with the user's frames only, for it and the exceptions it chains (only
    its message when no user code ran)."""
    report = traceback.TracebackException.from_exception(error)
    pending, seen = [report], set()
    while pending:
        part = pending.pop()
        if id(part) in seen:
            continue
        seen.add(id(part))
        part.stack = traceback.StackSummary.from_list(
            [frame for frame in part.stack if not is_own(frame.filename)]
        )
        pending += [chained for chained in (part.__cause__, part.__context__) if chained]
    return "".join(report.format())


def has_user_frames(error: BaseException, text: str = "") -> bool:
    """Whether any frame outside xlasim ran: by the exception's own frames when it has them
    (raised in this process), else by its formatted traceback `text` (raised elsewhere).

    Args:
        error: the exception a rank raised.
        text: its traceback as formatted where it was raised (a worker process), read when
            `error` carries no traceback of its own; empty when there is none.
    """
    if error.__traceback__ is not None:
        return first_user(error.__traceback__) is not None
    return any(
        not is_own(line.strip().removeprefix('File "'))
        for line in text.splitlines()
        if line.strip().startswith('File "')
    )
