"""The scheduler's pending timers (``store/timer.py``): what is due when, in memory, rebuilt from
the store at start.

Every timer and every cancellation is a record in ``rmq_sys_wheel_timer`` queue 0; the entry's tag
code is the timer's delivery time (epoch ms), or ``-(offset + 1)`` for a marker that cancels the
timer at CommitLog ``offset``.  ``Timers`` reads the queue as the dispatcher fills it (``ingest``)
and keeps each pending timer as 20 bytes in ``PendingTimers``: delivery time, CommitLog offset and
size, in numpy arrays sorted by delivery time.  The earliest is a lookup, the due ones a prefix:
nothing is looked at per timer while it waits.

Durability (``config/timerCheckpoint.json``, the scheduler's own file, written at least once a
second while timers move, and at stop):

- ``scannedOffset`` S and ``deliveredThroughMs`` W: every timer at a queue offset below S due at
  W or earlier has been delivered (or cancelled); the scheduler delivers in time order, after
  reading the queue up to S, so it can say this after a pass that found nothing more due at W
  (S is what it had read then, not what it read since);
- ``scanFloor`` F: no pending timer lies below queue offset F.

At start the queue is read from F: a timer is pending unless it lies below S and is due by W, or a
marker read after it cancels it.  A crash re-delivers at most what the last second delivered (at
least once, as RocketMQ); a clean stop, none.

Retention deletes CommitLog files older than ``fileReservedTime``; a timer due later than that is
**rolled** before its file gets old: once its file's last write is older than half the reserved
time, the timer is stored again (``TIMER_ROLL_TIMES`` + 1) with a marker cancelling the old copy,
in one put.
"""
from __future__ import annotations

import logging
import os
import time

import numpy as np

from rocketbox.store import configfile
from rocketbox.store.consumequeue import BLANK_ENTRY, ENTRY
from rocketbox.store.salvage import TOMBSTONE_TAGS
from rocketbox.store.timer import TIMER_TOPIC

log = logging.getLogger("rocketbox.scheduler")
READ = 65_536                  # queue entries read at a time


def _split(e: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """A slice of the timer queue -> (tag codes, which entries are timers, the CommitLog offsets
    its markers cancel); blank entries and tombstones are neither."""
    tags = e["tags"].astype(np.int64)
    timers = (tags > 0) & (e["size"] != BLANK_ENTRY[1])
    return tags, timers, (-tags[(tags < 0) & (tags != TOMBSTONE_TAGS)] - 1).tolist()


class PendingTimers:
    """Timers waiting: (when, phys, size), sorted by ``when`` from ``head`` on, plus the ones
    added since the last merge (``fresh``, unsorted).  A cancelled timer keeps its place with
    size 0 until its turn comes or the next merge drops it."""

    def __init__(self):
        self.when = np.empty(0, np.int64)
        self.phys = np.empty(0, np.int64)
        self.size = np.empty(0, np.int32)
        self.head = 0
        self.fresh: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.fresh_count, self.fresh_min = 0, None
        self.count = 0                                  # pending, not cancelled

    def __len__(self) -> int:
        return self.count

    @property
    def nbytes(self) -> int:
        return self.when.nbytes + self.phys.nbytes + self.size.nbytes + sum(w.nbytes * 2 + s.nbytes for w, _p, s in self.fresh)

    def add(self, when: np.ndarray, phys: np.ndarray, size: np.ndarray) -> None:
        if not len(when):
            return
        self.fresh.append((when.astype(np.int64), phys.astype(np.int64), size.astype(np.int32)))
        self.fresh_count += len(when)
        self.count += len(when)
        low = int(when.min())
        self.fresh_min = low if self.fresh_min is None else min(self.fresh_min, low)
        if self.fresh_count > max(65_536, (len(self.when) - self.head) // 4):
            self.merge()

    def merge(self) -> None:
        """The fresh timers into the sorted arrays, the delivered prefix and the cancelled ones
        dropped: the fresh ones sorted, then both runs placed into new arrays (about twice the
        arrays' size at the peak, never more)."""
        if not self.fresh and self.head == 0:
            return
        fw, fp, fs = (np.concatenate([f[k] for f in self.fresh]) if self.fresh else np.empty(0, t)
                      for k, t in ((0, np.int64), (1, np.int64), (2, np.int32)))
        order = np.argsort(fw, kind="stable")
        order = order[fs[order] > 0]                               # cancelled before the merge: dropped
        fw, fp, fs = fw[order], fp[order], fs[order]
        mw, mp, ms = self.when[self.head:], self.phys[self.head:], self.size[self.head:]
        live = ms > 0
        if not live.all():
            mw, mp, ms = mw[live], mp[live], ms[live]
        n, m = len(mw), len(fw)
        at = np.searchsorted(mw, fw, side="right") + np.arange(m)       # where each fresh one goes
        rest = np.ones(n + m, bool)
        rest[at] = False
        when, phys, size = np.empty(n + m, np.int64), np.empty(n + m, np.int64), np.empty(n + m, np.int32)
        when[at], phys[at], size[at] = fw, fp, fs
        when[rest], phys[rest], size[rest] = mw, mp, ms
        self.when, self.phys, self.size = when, phys, size
        self.head, self.fresh, self.fresh_count, self.fresh_min = 0, [], 0, None

    def next_due(self) -> int | None:
        """The earliest delivery time pending (a cancelled one may answer: an early wake only)."""
        first = int(self.when[self.head]) if self.head < len(self.when) else None
        if self.fresh_min is not None and (first is None or self.fresh_min < first):
            return self.fresh_min
        return first

    def due(self, now_ms: int, limit: int) -> tuple[np.ndarray, int]:
        """Up to ``limit`` pending timers due at ``now_ms`` or before, earliest first, as CQ
        entries (phys, size, tags = when), and the position just past them, for ``done``."""
        if self.fresh_min is not None and self.fresh_min <= now_ms:
            self.merge()
        end = self.head + int(np.searchsorted(self.when[self.head:self.head + limit], now_ms, side="right"))
        pick = np.arange(self.head, end)[self.size[self.head:end] > 0]
        out = np.empty(len(pick), ENTRY)
        out["phys"], out["size"], out["tags"] = self.phys[pick], self.size[pick], self.when[pick]
        self._at = pick
        return out, end

    def done(self, n: int, end: int) -> None:
        """The first ``n`` of the last ``due`` are delivered (all of them: move to ``end``)."""
        at = self._at
        if n >= len(at):
            self.head = end
        elif n > 0:
            self.head = int(at[n])
        self.count -= n
        if self.head > 65_536 and self.head > len(self.when) // 2:
            self.merge()

    def cancel(self, phys: int) -> bool:
        """Cancel the pending timer stored at ``phys`` -> whether one was pending."""
        hit = np.flatnonzero((self.phys[self.head:] == phys) & (self.size[self.head:] > 0))
        if len(hit):
            self.size[self.head + int(hit[0])] = 0
            self.count -= 1
            return True
        for _w, p, s in self.fresh:
            hit = np.flatnonzero((p == phys) & (s > 0))
            if len(hit):
                s[int(hit[0])] = 0
                self.count -= 1
                return True
        return False

    def below(self, line: int, limit: int) -> np.ndarray:
        """Up to ``limit`` pending timers stored below CommitLog offset ``line``, as CQ entries."""
        self.merge()
        pick = np.flatnonzero((self.phys[self.head:] < line) & (self.size[self.head:] > 0))[:limit] + self.head
        out = np.empty(len(pick), ENTRY)
        out["phys"], out["size"], out["tags"] = self.phys[pick], self.size[pick], self.when[pick]
        return out

    def min_phys(self) -> int | None:
        top = np.iinfo(np.int64).max
        lows = [int(np.min(self.phys[self.head:], where=self.size[self.head:] > 0, initial=top))]
        lows += [int(np.min(p, where=s > 0, initial=top)) for _w, p, s in self.fresh]
        low = min(lows)
        return None if low == top else low


class Timers:
    """The timer queue's reader and the checkpoint's owner (see the module's text)."""

    def __init__(self, cfg, view):
        self.cfg, self.view = cfg, view
        self.path = os.path.join(cfg.config_dir, "timerCheckpoint.json")
        self.pending = PendingTimers()
        self.scanned = 0              # queue entries read so far
        self.through = 0              # W
        self.through_scanned = 0      # S: what had been read when W was set
        self.floor = 0                # F
        self.dirty = True
        self.keep_ms = cfg.fileReservedTime * 3_600_000 // 2     # a timer's copy older than this is rolled

    def open(self) -> "Timers":
        """Rebuild the pending timers from the checkpoint and the queue."""
        data = configfile.read(self.path) or {}
        lo, hi = self._bounds()
        scanned, self.through = int(data.get("scannedOffset", 0)), int(data.get("deliveredThroughMs", 0))
        self.floor = min(max(int(data.get("scanFloor", 0)), lo), hi)
        cancels, at, t0 = [], self.floor, time.monotonic()
        while at < hi:
            e = self.view.entries(TIMER_TOPIC, 0, at, min(READ, hi - at))
            if not len(e):
                break
            tags, timers, cancelled = _split(e)
            timers &= ~((np.arange(at, at + len(e)) < scanned) & (tags <= self.through))   # delivered before the stop
            self.pending.add(tags[timers], e["phys"][timers], e["size"][timers])
            cancels += cancelled
            at += len(e)
        self.scanned, self.through_scanned = at, min(scanned, at)
        for phys in cancels:
            self.pending.cancel(phys)
        self.pending.merge()
        log.info("timers: %d pending, rebuilt from queue offsets [%d, %d) in %.2f s", len(self.pending),
                 self.floor, at, time.monotonic() - t0)
        return self

    def _bounds(self) -> tuple[int, int]:
        return self.view.offsets(TIMER_TOPIC, 0) or (0, 0)

    def ingest(self) -> None:
        """Read what the dispatcher added to the queue since the last call."""
        _lo, hi = self._bounds()
        while self.scanned < hi:
            e = self.view.entries(TIMER_TOPIC, 0, self.scanned, min(READ, hi - self.scanned))
            if not len(e):
                break
            tags, timers, cancelled = _split(e)
            self.pending.add(tags[timers], e["phys"][timers], e["size"][timers])
            for phys in cancelled:
                self.pending.cancel(phys)
            self.scanned += len(e)
            self.dirty = True

    def delivered_through(self, now_ms: int) -> None:
        """Every timer read so far that is due by ``now_ms`` has been delivered.  (Not a reason
        to write the checkpoint by itself: what it says then changes only with a delivery, a
        cancel or a timer read, which mark it.)"""
        if now_ms > self.through:
            self.through, self.through_scanned = now_ms, self.scanned

    def roll_line(self) -> int:
        """The CommitLog offset below which a timer's copy must be stored again: the end of the
        newest file (not the one being written) last written more than ``keep_ms`` ago."""
        cutoff, line = time.time() - self.keep_ms / 1000, 0
        try:
            names = sorted(n for n in os.listdir(self.cfg.commitlog_dir) if n.isdigit())
        except OSError:
            return 0
        for name in names[:-1]:
            try:
                if os.stat(os.path.join(self.cfg.commitlog_dir, name)).st_mtime < cutoff:
                    line = int(name) + self.cfg.mappedFileSizeCommitLog
            except OSError:
                continue
        return line

    def persist(self) -> None:
        if not self.dirty and os.path.exists(self.path):
            return
        low = self.pending.min_phys()
        self.floor = self._queue_offset_of(low) if low is not None else self.scanned
        nxt = self.pending.next_due()
        configfile.write_bytes(self.path, configfile.dumps({
            "scanFloor": self.floor, "scannedOffset": self.through_scanned, "deliveredThroughMs": self.through,
            "pending": len(self.pending), "nextDueMs": nxt if nxt is not None else 0}))
        self.dirty = False

    def _queue_offset_of(self, phys: int) -> int:
        """The queue offset of the entry for CommitLog offset ``phys`` (the queue is in
        CommitLog order); the first one above it if none is."""
        lo, hi = max(self._bounds()[0], self.floor), self.scanned
        while lo < hi:
            mid = (lo + hi) // 2
            e = self.view.entries(TIMER_TOPIC, 0, mid, 1)
            if len(e) and int(e["phys"][0]) < phys:
                lo = mid + 1
            else:
                hi = mid
        return lo
