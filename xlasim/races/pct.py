"""Which rank a seed's schedule runs next: PCT with priority change points (docs/races.md,
"Schedules").

PCT (Burckhardt, Kothari, Musuvathi, Nagarakatte, ASPLOS 2010): every rank gets a distinct
priority; at each decision the enabled rank of highest priority runs; at `depth - 1` change
points (decision numbers) the rank that ran last drops below every initial priority. For `n`
ranks and `k` decisions, a bug that needs `d` ordering constraints is hit with probability at
least `1 / (n k^(d-1))` when the change points are drawn uniformly in `1..k`. `k` is not known
before a launch ends, and a seed must decide everything alone (replay by seed), so here each
change point is drawn log-uniformly in `1..MAX_STEPS` (`P(s) = ln(1 + 1/s) / ln(MAX_STEPS + 1)`,
at least `1 / ((s + 1) ln(MAX_STEPS + 1))`): the bound becomes
`1 / (n ((k + 1) ln(MAX_STEPS + 1))^(d-1))`, about `1 / (n (14 (k + 1))^(d-1))`, for any
`k <= MAX_STEPS`, and change points past a short launch's end simply do not happen (those
seeds are PCT of depth 1).

PCT assumes every schedule ends; a rank polling a file another rank has yet to write would run
forever at a higher priority. A rank given `SPIN_REPEATS` turns in a row at one point (the
same operation, line and path) while others could run is polling: it drops below every rank
(a change point of its own, decided by the schedule as every other).

Everything depends only on the seed and the decisions before: the same program under the same
seed takes the same decisions, whatever the machine's load.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence

#: Change points are drawn in 1..MAX_STEPS decisions (log-uniformly: see above).
MAX_STEPS = 2**20
#: PCT's depth d: the bugs of d ordering constraints each seed may hit (d - 1 change points).
DEFAULT_DEPTH = 3
#: Turns in a row at one point that make a rank a poller (it yields to the others).
SPIN_REPEATS = 16


def change_points(seed: int, depth: int) -> list[int]:
    """The decision numbers (from 1) at which the last rank to run drops its priority.

    Args:
        seed: the schedule.
        depth: PCT's depth (depth - 1 change points).
    """
    draw = random.Random(f"pct-change-points:{seed}")
    top = math.log(MAX_STEPS + 1)
    return [min(MAX_STEPS, int(math.exp(draw.random() * top))) for _ in range(depth - 1)]


class Pct:
    """One launch's priorities under one seed.

    Args:
        seed: the schedule (a failure names it; `--schedule SEED` replays it).
        ranks: the ranks of the launch.
        depth: PCT's depth.
    """

    def __init__(self, seed: int, ranks: Sequence[int], depth: int = DEFAULT_DEPTH):
        self.seed = seed
        self.depth = depth
        order = random.Random(f"pct-priorities:{seed}").sample(list(ranks), len(ranks))
        #: Higher runs first: the initial ones are depth..depth+n-1, above every change point's.
        self.priority = {rank: depth + place for place, rank in enumerate(order)}
        self._changes = {step: depth - 1 - i for i, step in enumerate(change_points(seed, depth))}
        self._lowest = 0
        self._last: int | None = None
        self._streak: Counter[tuple[str, str]] = Counter()

    def choose(self, step: int, enabled: Sequence[int], points: dict[int, tuple[str, str]]) -> int:
        """The rank that runs at decision `step`.

        Args:
            step: the decision's number (from 1).
            enabled: the ranks that may run (at least one).
            points: each enabled rank's next point (what it does, where), to tell pollers.
        """
        last = self._last
        if last is not None and step in self._changes:
            self.priority[last] = self._changes[step]
        if last is not None and last in enabled and len(enabled) > 1:
            self._streak[points[last]] += 1
            if self._streak[points[last]] >= SPIN_REPEATS:
                self._lowest -= 1
                self.priority[last] = self._lowest
        chosen = max(enabled, key=self.priority.__getitem__)
        if chosen != last:
            self._streak.clear()
        self._last = chosen
        return chosen
