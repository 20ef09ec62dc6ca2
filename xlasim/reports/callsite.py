"""Where a rank is: the user's source line of a call, and the Python stack of a thread.

Reports point at the user's code, not at xlasim or torch_xla internals, so frames from those
packages (and from torch) are skipped when naming the line that made a call.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import traceback
from types import FrameType

import torch

#: xlasim's package (every layer of it), torch's and the standard library's directories.
_INTERNAL_DIRS = tuple(
    os.path.dirname(os.path.abspath(path)) + os.sep
    for path in (os.path.dirname(__file__), torch.__file__, threading.__file__)
)


@functools.lru_cache(maxsize=4096)
def is_internal(filename: str) -> bool:
    """Whether code of `filename` is xlasim's, torch's, torch_xla's or the standard library's."""
    if filename.startswith("<"):
        return True
    absolute = os.path.abspath(filename)
    if f"{os.sep}torch_xla{os.sep}" in absolute:
        return True
    if f"{os.sep}site-packages{os.sep}" in absolute and not absolute.startswith(_INTERNAL_DIRS[:2]):
        return False
    return absolute.startswith(_INTERNAL_DIRS)


def user_frame(frame: FrameType | None = None) -> FrameType | None:
    """The innermost frame that belongs to user code (outside xlasim, torch and torch_xla)."""
    frame = frame or sys._getframe(1)
    while frame is not None and is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def call_location(frame: FrameType | None = None) -> str:
    """`file.py:LINE in function` of the user code that is calling into us."""
    found = user_frame(frame or sys._getframe(1))
    if found is None:
        return "<unknown location>"
    return f"{_short(found.f_code.co_filename)}:{found.f_lineno} in {found.f_code.co_name}"


@functools.lru_cache(maxsize=4096)
def _short(filename: str) -> str:
    relative = os.path.relpath(filename)
    return filename if relative.startswith("..") else relative


def thread_stack(thread: threading.Thread) -> str:
    """The user frames of a live thread's Python stack (innermost last)."""
    frame = sys._current_frames().get(thread.ident or -1)
    if frame is None:
        return "    (thread is not running)\n"
    summary = traceback.extract_stack(frame)
    user = [entry for entry in summary if not is_internal(entry.filename)]
    return "".join(traceback.format_list(user or summary[-3:]))


def thread_location(thread: threading.Thread) -> str:
    """The user source line a live thread is executing right now."""
    frame = sys._current_frames().get(thread.ident or -1)
    return call_location(frame) if frame is not None else "<not running>"
