"""A picture of a timeline: ranks against time, collectives named, waits shaded.

matplotlib is an optional extra (`pip install xlasim[trace]`); nothing else imports it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ..events import model
from .timeline import Timeline

_COLORS = {
    "graph": "#9ecae1",
    "checkpoint": "#9e9ac8",
    "collective": "#74c476",
    "wait": "#fd8d3c",
    "hung": "#e31a1c",
}


def available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def draw(timeline: Timeline, path: str | Path, title: str | None = None) -> list[tuple[int, str]]:
    """Write a PNG of `timeline`: one row per rank (rank 0 on top), milliseconds across.

    Args:
        timeline: the loaded trace (`timeline.load`).
        path: where the PNG goes.
        title: the figure's title (default: the ranks and the span of time shown).

    Returns:
        The labels written on each rank's row, `(rank, text)`, in drawing order.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot
    from matplotlib.patches import Patch

    def ms(t: int) -> float:
        return (t - timeline.start) / 1e6

    ranks = sorted(timeline.ranks)
    drawn: list[tuple[int, str]] = []
    wide = (timeline.end - timeline.start) / 1e6 * 0.06  # ms: room for a bar's name
    height = 1.2 + 0.45 * len(ranks)
    figure, axes = pyplot.subplots(figsize=(11, max(2.5, height)), dpi=80)
    for row, rank in enumerate(ranks):
        y = len(ranks) - 1 - row
        lanes = timeline.ranks[rank]
        for span in lanes.spans:
            if span.kind == model.LAUNCH:
                start, stop = ms(span.start), ms(span.stop(timeline.end))
                axes.plot([start, stop], [y, y], color="#969696", linewidth=1, zorder=0)
                if span.end is None:
                    axes.text(stop, y - 0.05, "still running ", fontsize=7, ha="right", va="top")
                    drawn.append((rank, "still running"))
            elif span.kind in (model.GRAPH, model.CHECKPOINT):
                start, stop = ms(span.start), ms(span.stop(timeline.end))
                axes.broken_barh(
                    [(start, stop - start)], (y - 0.3, 0.6), color=_COLORS[span.kind], linewidth=0
                )
        for collective in lanes.collectives:
            stop = collective.returned if collective.returned is not None else timeline.end
            start = ms(collective.entered)
            axes.broken_barh(
                [(start, ms(stop) - start)],
                (y - 0.3, 0.6),
                color=_COLORS["collective"],
                linewidth=0,
            )
            never_met = collective.last_arrived is None and bool(collective.group)
            waited = stop if never_met else (collective.last_arrived or collective.arrived)
            if waited > collective.arrived:
                axes.broken_barh(
                    [(ms(collective.arrived), ms(waited) - ms(collective.arrived))],
                    (y - 0.3, 0.6),
                    color=_COLORS["hung" if never_met else "wait"],
                    alpha=0.8,
                    hatch="//",
                    linewidth=0,
                )
            label = f"{collective.op} #{collective.seq}"
            if never_met:
                label = f"{label}: waited from {start:.0f} ms, never met"
            if never_met or ms(stop) - start >= wide:
                axes.text(start, y + 0.34, label, fontsize=7, va="bottom", clip_on=True)
                drawn.append((rank, label))
    axes.set_yticks(range(len(ranks)))
    axes.set_yticklabels([f"rank {r}" for r in reversed(ranks)])
    axes.set_ylim(-0.7, len(ranks) - 0.1)
    axes.set_xlim(0, max(ms(timeline.end), 1e-3) * 1.02)
    axes.set_xlabel("milliseconds since the first event")
    axes.set_title(title or f"{len(ranks)} ranks, {ms(timeline.end):.1f} ms")
    axes.legend(
        handles=[
            Patch(color=_COLORS["graph"], label="graph execution"),
            Patch(color=_COLORS["checkpoint"], label="checkpoint"),
            Patch(color=_COLORS["collective"], label="collective"),
            Patch(color=_COLORS["wait"], alpha=0.8, hatch="//", label="waiting for the group"),
            Patch(color=_COLORS["hung"], alpha=0.8, hatch="//", label="waiting, never met"),
        ],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.3),
        ncol=5,
        fontsize=8,
        frameon=False,
    )
    axes.grid(axis="x", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)
    return drawn
