"""Histograms in the shared state (``layout.HISTOGRAMS``): a role observes values into its own
(each has one writing process), the metrics role and the readers read them.

A histogram's words: how many values were observed, their sum and the largest, then a count per
bucket -- bucket i holds the values v with ``bounds[i-1] < v <= bounds[i]``, the last one those
above every bound (Prometheus' ``le``).  Counts are not cumulative here; ``Snapshot`` makes them so.
Observing a pass's values costs its writer a few scalar adds (or one vector pass), once per pass,
never per message on the send path.
"""
from __future__ import annotations

import bisect
from typing import NamedTuple

import numpy as np

from rocketbox.shm.layout import HIST_HEAD, HISTOGRAMS

COUNT, SUM, MAX = 0, 1, 2


class Histogram:
    """Histogram ``index`` (``layout.H``) of ``views["histograms"]``, for its one writer."""

    def __init__(self, views: dict, index: int):
        self.words = views["histograms"][index]
        self.bounds = HISTOGRAMS[index][3]
        self.edges = np.array(self.bounds, dtype=np.int64)

    def observe(self, value: int, n: int = 1) -> None:
        """``n`` values of ``value`` each."""
        w = self.words
        w[HIST_HEAD + bisect.bisect_left(self.bounds, value)] += n
        w[SUM] += value * n
        if value > w[MAX]:
            w[MAX] = value
        w[COUNT] += n

    def observe_many(self, values) -> None:
        """Each of ``values`` (a sequence of ints) once."""
        v = np.asarray(values, dtype=np.int64)
        if not v.size:
            return
        w = self.words
        w[HIST_HEAD:HIST_HEAD + len(self.bounds) + 1] += np.bincount(np.searchsorted(self.edges, v, side="left"),
                                                                     minlength=len(self.bounds) + 1)
        w[SUM] += int(v.sum())
        top = int(v.max())
        if top > w[MAX]:
            w[MAX] = top
        w[COUNT] += v.size


class Snapshot(NamedTuple):
    """A histogram as read: cumulative counts at each bound then +Inf, the sum, the largest value."""
    bounds: tuple
    cumulative: list[int]
    sum: int
    max: int

    @property
    def total(self) -> int:
        """How many values were observed."""
        return self.cumulative[-1]

    def minus(self, earlier: "Snapshot") -> "Snapshot":
        """What was observed since ``earlier`` (the largest value: since ever)."""
        return Snapshot(self.bounds, [a - b for a, b in zip(self.cumulative, earlier.cumulative)],
                        self.sum - earlier.sum, self.max)

    def quantile(self, q: float) -> float:
        """The upper bound of the bucket holding the q-quantile (the largest value seen when it is
        past the last bound); 0 when nothing was observed."""
        if not self.total:
            return 0.0
        rank = q * self.total
        for bound, c in zip(self.bounds, self.cumulative):
            if c >= rank:
                return float(bound)
        return float(self.max)


def read(views: dict, index: int) -> tuple[list[int], int, int]:
    """Histogram ``index`` now: (its count per bucket, not cumulative; the sum; the largest).
    The counts are read first and their total is the count (a value being observed meanwhile is
    in the buckets or not, consistently)."""
    w = views["histograms"][index]
    buckets = w[HIST_HEAD:HIST_HEAD + len(HISTOGRAMS[index][3]) + 1].tolist()
    return buckets, int(w[SUM]), int(w[MAX])


def snapshot(views: dict, index: int) -> Snapshot:
    """Histogram ``index`` now, its counts cumulative."""
    buckets, total, largest = read(views, index)
    return Snapshot(HISTOGRAMS[index][3], np.cumsum(buckets).tolist(), total, largest)
