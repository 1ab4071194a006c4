"""The broker's message counts (shm/stats.py) on a real shared segment: from zero at start, marked
at each new day, rates over the samples a reader took."""
from rocketbox.shm import stats
from rocketbox.shm.layout import C, S
from rocketbox.shm.state import SharedState
from tests.unit.writer.rig import small_config


def test_counts_start_at_zero_and_roll_at_midnight(tmp_path):
    cfg = small_config(tmp_path / "store", "st")
    sh = SharedState(cfg.geometry()).create()
    try:
        qmax = sh.views["queue_max"]
        qmax[:3] = (10, 20, 30)                       # what the store held at start: not counted
        sh.control[C.QUEUE_COUNT] = 3
        stats.start(sh, 1_000, day=100)
        assert stats.totals(sh) == (0, 0)
        qmax[:3] = (15, 20, 32)
        sh.slots[0, S.PULLED_MSGS], sh.slots[2, S.PULLED_MSGS] = 4, 3
        assert stats.totals(sh) == (7, 7)
        assert not stats.mark_day(sh, 100)            # the same day: nothing moves
        assert stats.mark_day(sh, 101)
        assert [int(sh.control[f]) for f in (C.PUT_YESTERDAY_MORNING, C.PUT_TODAY_MORNING, C.GET_YESTERDAY_MORNING,
                                             C.GET_TODAY_MORNING)] == [0, 7, 0, 7]
        qmax[0] += 5
        assert stats.mark_day(sh, 102)
        assert [int(sh.control[f]) for f in (C.PUT_YESTERDAY_MORNING, C.PUT_TODAY_MORNING)] == [7, 12]
        sh.slots[1, S.PULLS_FOUND], sh.slots[2, S.PULLS_FOUND], sh.slots[2, S.PULLS_MISSED] = 2, 5, 4
        assert stats.pulls(sh) == (7, 4)
        rates = stats.Rates(sh)
        assert rates.samples[-1][1:] == (12, 7, 7, 4, 11)
        rates.samples.clear()
        rates.samples.extend([(0.0, 0, 0, 0, 0, 0), (5.0, 50, 10, 3, 7, 10), (10.0, 120, 20, 5, 10, 15)])
        assert [rates.tps(w) for w in (stats.PUT, stats.GOT, stats.FOUND, stats.MISSED, stats.PULLS)] == \
            ["12.0 12.0 12.0", "2.0 2.0 2.0", "0.5 0.5 0.5", "1.0 1.0 1.0", "1.5 1.5 1.5"]
        rates.samples.extend((10.0 + i, 120 + 3 * i, 20, 5, 10 + i, 15 + i) for i in range(1, 20))  # the last 19 s
        assert [rates.tps(w).split(" ")[0] for w in (stats.PUT, stats.GOT, stats.FOUND, stats.MISSED, stats.PULLS)] \
            == ["3.0", "0.0", "0.0", "1.0", "1.0"]
    finally:
        sh.close()
        sh.unlink()
