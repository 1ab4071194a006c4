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

import numpy as np

from rocketbox.shm.layout import C, S

WINDOWS_S = (10, 60, 600)          # StoreStatsService's three windows
PUT, GOT, FOUND, MISSED, PULLS = 1, 2, 3, 4, 5     # what a sample holds after its time (Rates.tps)
GROUP_SAMPLE_TICKS, GROUP_SAMPLES = 10, 7     # StatsItem's minute: a sample every 10 s, the last 7


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


class Rates:
    """A reader's samples of the counts, one per tick, for the last 600 s."""

    def __init__(self, sh):
        self.sh = sh
        self.samples: collections.deque = collections.deque(maxlen=WINDOWS_S[-1] + 1)
        self.group_samples: collections.deque = collections.deque(maxlen=GROUP_SAMPLES)
        self.ticks = 0
        self.sample()

    def sample(self) -> None:
        found, missed = pulls(self.sh)
        self.samples.append((time.monotonic(), *totals(self.sh), found, missed, found + missed))
        if self.ticks % GROUP_SAMPLE_TICKS == 0:
            self.group_samples.append((time.monotonic(), self._group_pulls()))
        self.ticks += 1

    def _group_pulls(self) -> np.ndarray:
        """Messages found for each consumer offset slot in use, over every reader slot's row."""
        return self.sh.views["offset_pulls"][:, :int(self.sh.control[C.OFFSET_COUNT])].sum(axis=0)

    def group_tps(self, offset_slots: list[int]) -> float:
        """Messages per second the pulls of the offset slots ``offset_slots`` (a group's queues of a
        topic) found since the oldest sample: 0.0 until one is a second old."""
        since, then = self.group_samples[0]
        span = time.monotonic() - since
        if span < 1.0 or not offset_slots:
            return 0.0
        now = self._group_pulls()              # (read after the slots were looked up: it covers them)
        before = np.zeros_like(now)
        before[:len(then)] = then               # (slots taken since the sample counted from 0)
        return round(float((now[offset_slots] - before[offset_slots]).sum()) / span, 2)

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
            "msgGetTotalTodayNow": str(gets),
        }
