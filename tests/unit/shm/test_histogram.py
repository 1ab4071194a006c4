"""The shared histograms (shm/histogram.py): a value lands in the first bucket whose bound it does
not pass (Prometheus' ``le``); one value at a time and a pass's values at once count the same."""
from __future__ import annotations

import random

import numpy as np

from rocketbox.shm import histogram
from rocketbox.shm.layout import HIST_LEN, HISTOGRAMS, H


def _views():
    return {"histograms": np.zeros((len(HISTOGRAMS), HIST_LEN), dtype=np.int64)}


def test_a_value_on_a_bound_is_in_that_bounds_bucket():
    views = _views()
    h = histogram.Histogram(views, H.MESSAGE_SIZE)
    for v in (0, 1024, 1025, 4096, 10**9):
        h.observe(v)
    snap = histogram.snapshot(views, H.MESSAGE_SIZE)
    assert snap.bounds[:2] == (1024, 4096)
    assert snap.cumulative[:3] == [2, 4, 4] and snap.total == 5
    assert snap.sum == 0 + 1024 + 1025 + 4096 + 10**9 and snap.max == 10**9


def test_one_at_a_time_and_all_at_once_count_the_same():
    rng = random.Random(54)
    for index in range(len(HISTOGRAMS)):
        a, b = _views(), _views()
        bounds = HISTOGRAMS[index][3]
        values = [rng.choice([0, 1, *bounds, *(x + 1 for x in bounds), rng.randrange(0, 2 * bounds[-1])])
                  for _ in range(500)]
        one = histogram.Histogram(a, index)
        for v in values:
            one.observe(v)
        histogram.Histogram(b, index).observe_many(values)
        histogram.Histogram(b, index).observe_many([])
        assert a["histograms"].tobytes() == b["histograms"].tobytes()


def test_a_window_and_its_quantiles():
    views = _views()
    h = histogram.Histogram(views, H.PUT_LATENCY)
    h.observe(50, 90)                    # 90 records under 0.1 ms
    before = histogram.snapshot(views, H.PUT_LATENCY)
    h.observe(700, 98)                   # then 98 at 0.7 ms, 2 at 20 ms
    h.observe(20_000, 2)
    since = histogram.snapshot(views, H.PUT_LATENCY).minus(before)
    assert since.total == 100
    assert since.quantile(0.5) == 1000 and since.quantile(0.99) == 25_000
    h.observe(60_000_000)                # past the last bound: the largest seen
    assert histogram.snapshot(views, H.PUT_LATENCY).quantile(1.0) == 60_000_000
    assert histogram.snapshot(_views(), H.PUT_LATENCY).quantile(0.99) == 0.0
