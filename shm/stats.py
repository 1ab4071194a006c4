"""The broker's message counts, as RocketMQ's StoreStatsService and BrokerStats keep them for
GET_BROKER_RUNTIME_INFO (what ``mqadmin clusterList`` prints: in and out TPS, messages in and out
yesterday and today).

Nothing on the send or pull path counts more than it did: a put is a message in a consume queue
(the sum of the queue max offsets the dispatcher publishes), and a get is a message a pull
transferred (each reader adds its pulls' messages to its slot's ``pulled_msgs``, which a new owner
of the slot keeps counting on).  Both count from the appliance's start, as a broker's from its
boot: the supervisor takes the puts then (``boot_puts``), and at start and at each local midnight
it marks both counts (yesterday's morning marks become today's old ones), as BrokerStats does, so
every reader gives the same figures.  Pulls are counted too, as StoreStatsService counts its
getMessage calls: those that found messages and those that found none (each try of a held pull
counts), in each reader's slot (``pulls_found``, ``pulls_missed``).  Rates (TPS over the last 10, 60
and 600 s) come from samples each reader takes on its 1 s tick: the same counts, so the same rates
whichever reader answers.

A consumer group's rate on a topic (GET_CONSUME_STATS' consumeTps, BrokerStatsManager's
GROUP_GET_NUMS over its last minute) counts the messages its pulls found: each reader adds them to
its row of ``offset_pulls``, in the column of the group's consumer offset slot on the queue; what
its pulls found before the group's first commit on the queue made that slot is added once the
slot exists (readers/pull.py ``_counter``), so a broadcasting group, whose offsets stay with its
members, is not counted.  Each reader samples the columns' sums over the rows every
10 s, as StatsItem samples a minute, and answers with the messages counted since its oldest sample
(up to a minute old) per second.
"""
from __future__ import annotations

import collections
import time
from typing import NamedTuple

import numpy as np

from rocketbox.shm import histogram
from rocketbox.shm.layout import HISTOGRAMS, C, H, S

WINDOWS_S = (10, 60, 600)          # StoreStatsService's three windows
PUT, GOT, FOUND, MISSED, PULLS = 1, 2, 3, 4, 5     # what a sample holds after its time (Rates.tps)
# putMessageDistributeTime's buckets: (its name, its upper bound in µs, one of the put latency histogram's bounds)
DISTRIBUTION = (("<=0ms", 1_000), ("0~10ms", 10_000), ("10~50ms", 50_000), ("50~100ms", 100_000),
                ("100~200ms", 200_000), ("200~500ms", 500_000), ("500ms~1s", 1_000_000), ("1~2s", 2_000_000),
                ("2~3s", 3_000_000), ("3~4s", 4_000_000), ("4~5s", 5_000_000), ("5~10s", 10_000_000), ("10s~", None))
WINDOWS = (("statsMinute", 10, 7), ("statsHour", 600, 7), ("statsDay", 3600, 25))   # StatsItem's: (name, a
                                                  # sample every so many 1 s ticks, the last so many kept)


def _queued(sh) -> int:
    """Messages in the consume queues: the sum of their max offsets."""
    return int(sh.views["queue_max"][:int(sh.control[C.QUEUE_COUNT])].sum())


def totals(sh) -> tuple[int, int]:
    """(messages put, messages pulled) since the appliance started."""
    return _queued(sh) - int(sh.control[C.BOOT_PUTS]), int(sh.slots[:, S.PULLED_MSGS].sum())


def pulls(sh) -> tuple[int, int]:
    """(pulls that found messages, pulls that found none) since the appliance started."""
    return int(sh.slots[:, S.PULLS_FOUND].sum()), int(sh.slots[:, S.PULLS_MISSED].sum())


def start(sh, now_ms: int, day: int) -> None:
    """At the appliance's start (the supervisor, after recovery): counts from zero, marked so."""
    ctl = sh.control
    ctl[C.BOOT_PUTS] = _queued(sh)
    ctl[C.BOOT_MS] = now_ms
    for f in (C.PUT_YESTERDAY_MORNING, C.PUT_TODAY_MORNING, C.GET_YESTERDAY_MORNING, C.GET_TODAY_MORNING):
        ctl[f] = 0
    ctl[C.STATS_DAY] = day


def mark_day(sh, day: int) -> bool:
    """The supervisor, now and then: on a new local date, today's morning marks become
    yesterday's and the counts now today's.  True when it marked."""
    ctl = sh.control
    if int(ctl[C.STATS_DAY]) == day:
        return False
    puts, gets = totals(sh)
    ctl[C.PUT_YESTERDAY_MORNING], ctl[C.GET_YESTERDAY_MORNING] = ctl[C.PUT_TODAY_MORNING], ctl[C.GET_TODAY_MORNING]
    ctl[C.PUT_TODAY_MORNING], ctl[C.GET_TODAY_MORNING] = puts, gets
    ctl[C.STATS_DAY] = day
    return True


class Snap(NamedTuple):
    """The counts a window's sample holds (the arrays cover the slots in use then)."""
    puts: int
    gets: int
    queue_max: np.ndarray        # per queue slot: messages in the queue, ever
    queue_bytes: np.ndarray      # per queue slot: their bytes, since this start
    group_pulls: np.ndarray      # per consumer offset slot: messages its group's pulls found
    put_latency: list            # the put latency histogram's buckets


def since_start(counts: np.ndarray, which: list[int]) -> int:
    """The slots ``which`` of a sample's ``counts`` summed (a slot taken after the sample counts 0)."""
    return int(counts[[i for i in which if i < len(counts)]].sum())


class Rates:
    """A reader's samples of the counts: one per tick for the last 600 s (the TPS windows), and
    BrokerStatsManager's three StatsItem windows: a sample every 10 s for a minute, every 10 min
    for an hour, every hour for a day (``WINDOWS``)."""

    def __init__(self, sh):
        self.sh = sh
        self.samples: collections.deque = collections.deque(maxlen=WINDOWS_S[-1] + 1)
        self.windows = {name: collections.deque(maxlen=keep) for name, _every, keep in WINDOWS}
        self.ticks = 0
        self.sample()

    def sample(self) -> None:
        found, missed = pulls(self.sh)
        now = time.monotonic()
        self.samples.append((now, *totals(self.sh), found, missed, found + missed))
        snap = None
        for name, every, _keep in WINDOWS:
            if self.ticks % every == 0:
                snap = snap or self.snap()
                self.windows[name].append((now, snap))
        self.ticks += 1

    def snap(self) -> Snap:
        sh, v = self.sh, self.sh.views
        nq, no = int(sh.control[C.QUEUE_COUNT]), int(sh.control[C.OFFSET_COUNT])
        puts, gets = totals(sh)
        return Snap(puts, gets, v["queue_max"][:nq].copy(), v["queue_bytes"][:nq].copy(),
                    v["offset_pulls"][:, :no].sum(axis=0), histogram.snapshot(v, H.PUT_LATENCY).cumulative)

    def group_tps(self, offset_slots: list[int]) -> float:
        """Messages per second the pulls of the offset slots ``offset_slots`` (a group's queues of a
        topic) found since the minute window's oldest sample: 0.0 until one is a second old."""
        since, then = self.windows["statsMinute"][0]
        span = time.monotonic() - since
        if span < 1.0 or not offset_slots:
            return 0.0
        now = self.snap()                 # (read after the slots were looked up: it covers them)
        return round((since_start(now.group_pulls, offset_slots) - since_start(then.group_pulls, offset_slots)) / span, 2)

    def stats(self, count) -> dict:
        """VIEW_BROKER_STATS_DATA's body for a count: ``count(snap) -> int`` over each window,
        from its oldest sample to now: the sum, and it per second (RocketMQ's avgpt, the count per
        call, is 0.0: calls are not counted, only what they carried)."""
        now_t, now = time.monotonic(), self.snap()
        out = {}
        for name, samples in self.windows.items():
            since, then = samples[0]
            total = count(now) - count(then)
            span = now_t - since
            out[name] = {"avgpt": 0.0, "sum": total, "tps": total / span if span > 0 and total else 0.0}
        return out

    def latency_last_minute(self) -> histogram.Snapshot:
        """The put latency histogram over the minute window (putMessageDistributeTime)."""
        _since_t, then = self.windows["statsMinute"][0]
        bounds = HISTOGRAMS[H.PUT_LATENCY][3]
        return histogram.snapshot(self.sh.views, H.PUT_LATENCY).minus(histogram.Snapshot(bounds, then.put_latency, 0, 0))

    def tps(self, which: int) -> str:
        """StoreStatsService's putTps (``which`` PUT), getTransferedTps (GOT), getFoundTps (FOUND),
        getMissTps (MISSED) or getTotalTps (PULLS): the rates over the three windows,
        space-separated (over the samples there are, before a window is full)."""
        out, last = [], self.samples[-1]
        for window in WINDOWS_S:
            first = self.samples[max(0, len(self.samples) - 1 - window)]
            span = last[0] - first[0]
            out.append(repr(round((last[which] - first[which]) / span, 2) if span > 0 else 0.0))
        return " ".join(out)

    def runtime(self) -> dict[str, str]:
        """The runtime-info keys of these counts."""
        ctl = self.sh.control
        puts, gets = totals(self.sh)
        boot_ms = int(ctl[C.BOOT_MS])
        up = max(0, int(time.time() * 1000) - boot_ms) // 1000
        put_tps, get_tps = self.tps(PUT), self.tps(GOT)
        return {
            "bootTimestamp": str(boot_ms),
            "runtime": f"[ {up // 86400} days, {up % 86400 // 3600} hours, {up % 3600 // 60} minutes, {up % 60} seconds ]",
            "putTps": put_tps, "getTransferedTps": get_tps, "getTransferredTps": get_tps,
            "getFoundTps": self.tps(FOUND), "getMissTps": self.tps(MISSED), "getTotalTps": self.tps(PULLS),
            "msgPutTotalYesterdayMorning": str(int(ctl[C.PUT_YESTERDAY_MORNING])),
            "msgPutTotalTodayMorning": str(int(ctl[C.PUT_TODAY_MORNING])),
            "msgPutTotalTodayNow": str(puts),
            "msgGetTotalYesterdayMorning": str(int(ctl[C.GET_YESTERDAY_MORNING])),
            "msgGetTotalTodayMorning": str(int(ctl[C.GET_TODAY_MORNING])),
            "msgGetTotalTodayNow": str(gets), **self._puts(),
        }

    def _puts(self) -> dict[str, str]:
        """The put latency and size keys: from the writer's put latency histogram (its last
        minute for the distribution and the percentiles, the largest ever), the dispatcher's
        message sizes, and the readers' longest pull."""
        views = self.sh.views
        minute = self.latency_last_minute()
        at = dict(zip(minute.bounds, minute.cumulative))
        below, parts = 0, []
        for name, bound in DISTRIBUTION:
            upto = minute.total if bound is None else at[bound]
            parts.append(f"[{name}]:{upto - below}")
            below = upto
        sizes = histogram.snapshot(views, H.MESSAGE_SIZE)
        return {
            "putMessageDistributeTime": " ".join(parts) + " ",
            "putLatency99": f"{minute.quantile(0.99) / 1000:.2f}", "putLatency999": f"{minute.quantile(0.999) / 1000:.2f}",
            "putMessageEntireTimeMax": str(minute.max // 1000),          # (the largest ever: ``minus`` keeps it)
            "putMessageTimesTotal": str(sizes.total), "putMessageSizeTotal": str(sizes.sum),
            "putMessageAverageSize": repr(sizes.sum / sizes.total if sizes.total else 0.0),
            "getMessageEntireTimeMax": str(int(self.sh.slots[:, S.PULL_MS_MAX].max())),
        }
