"""Run by tests/core/test_rank_output_lines.py under `xlasim run`: every rank prints lines of
many pieces (`print` writes each piece, then the newline), flushed, to stdout and to stderr."""

from __future__ import annotations

import sys

import torch_xla
import torch_xla.core.xla_model as xm

LINES = 40


def main(index: int) -> None:
    for number in range(LINES):
        print("line", index, number, "of", LINES, "from", "rank", index, flush=True)
        if number % 8 == 0:
            print("err", index, number, "on", "stderr", file=sys.stderr, flush=True)
        if number == LINES // 2:
            xm.rendezvous("half")


if __name__ == "__main__":
    torch_xla.launch(main)
