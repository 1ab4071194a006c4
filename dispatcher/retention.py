"""The dispatcher's share of retention: it owns the consume queues and the index, so it is the
one that follows what the cleaner decided.

- ``retire``: the cleaner deleted the CommitLog below ``min_phys`` (moving it first); the
  consume-queue files and IndexFiles that point only below it go, and each queue's min offset is
  published (a pull below it is answered OFFSET_MOVED).
- ``hide_expired``: per-topic retention and purges (``retentionMs``, ``purgedBeforeMs``,
  ``purgedQueues`` in topics.json) move a queue's min offset to its first message stored at or
  after the cutoff, every ``cleanResourceInterval``; the bytes stay until retention deletes them.

Runs inside the dispatcher's turn, on its open files (``Retention(dispatcher)``).
"""
from __future__ import annotations

import logging
import os
import time

from rocketbox.shm.layout import C
from rocketbox.store import indexfile, message, topicjournal
from rocketbox.store.consumequeue import ConsumeQueue
from rocketbox.store.errors import StoreError
from rocketbox.store.topicconfig import queue_nums

log = logging.getLogger("rocketbox.dispatcher")


class Retention:
    def __init__(self, dispatcher):
        self.dispatcher = dispatcher
        self.retired = int(dispatcher.ctl[C.MIN_PHYS])     # (recovery moved the min offsets to it)
        self.hidden_at = -1e9                               # per-topic retention: the first turn at once

    def follow(self) -> None:
        """What retention asks of the dispatcher now, if anything."""
        d = self.dispatcher
        if int(d.ctl[C.MIN_PHYS]) > self.retired:
            self.retire(int(d.ctl[C.MIN_PHYS]))
        if time.monotonic() - self.hidden_at >= d.cfg.cleanResourceInterval / 1000:
            self.hide_expired()

    def retire(self, min_phys: int) -> None:
        """Retention deleted the CommitLog below ``min_phys`` (the cleaner's ``min_phys``): delete
        the consume-queue files and IndexFiles that point only below it and publish each queue's
        new min offset (a pull below it is answered OFFSET_MOVED)."""
        d = self.dispatcher
        v, n = d.sh.views, d.sh.queue_count()
        for s in range(n):
            key = (v["queue_names"][s].decode(), int(v["queue_ids"][s]))
            d.slot_of.setdefault((key[0].encode(), key[1]), s)
            d.slot_key[s] = key
            v["queue_min"][s] = d._cq(key).retire(min_phys)
        current = d.index.path if d.index is not None else None
        for path in indexfile.list_index_files(d.cfg.index_dir)[:-1]:
            if path == current:
                continue
            ix = indexfile.IndexFile(path, d.cfg.maxHashSlotNum, d.cfg.maxIndexNum, False).open()
            try:
                below = ix.h("end_phys") < min_phys
            finally:
                ix.close()
            if below:
                os.unlink(path)
        self.retired = min_phys
        log.info("CommitLog below %d deleted by retention: consume queues and index follow", min_phys)

    def hide_expired(self, now_ms: int | None = None) -> None:
        """Per-topic retention and purges (``writer.topics.ATTRIBUTES`` in topics.json): each queue
        of such a topic gets as min offset its first message stored at or after the topic's cutoff,
        max(now - retentionMs, purgedBeforeMs); the bytes stay in the CommitLog until retention
        deletes their file.  A min offset only moves forward."""
        d = self.dispatcher
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        self.hidden_at = time.monotonic()
        try:
            data = topicjournal.read(d.cfg.config_dir) or {}
        except StoreError as e:                             # (the writer's file: it says so itself)
            log.warning("per-topic retention skipped this time: %s", e)
            return
        for name, tc in data.get("topicConfigTable", {}).items():
            ret, purged = int(tc.get("retentionMs") or 0), int(tc.get("purgedBeforeMs") or 0)
            cutoff, queues = max(now_ms - ret if ret else 0, purged), tc.get("purgedQueues") or {}
            if cutoff <= 0 and not queues:
                continue
            for q in range(queue_nums(tc)):
                s = d.queues.slot(name, q)
                if s is None or max(cutoff, int(queues.get(str(q), 0))) <= 0:
                    continue
                d.slot_key[s] = (name, q)
                cq = d._cq((name, q))
                low = self._first_stored_at(cq, max(cutoff, int(queues.get(str(q), 0))))
                if low > cq.min_offset:
                    cq.low = low
                    d.sh.views["queue_min"][s] = cq.min_offset

    def _first_stored_at(self, cq: ConsumeQueue, ts: int) -> int:
        """The queue's first offset whose message was stored at or after ``ts`` (store times only
        grow along a queue): a binary search reading each probed record's STORETIMESTAMP."""
        lo, hi = cq.min_offset, cq.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            if self._store_ts(int(cq.entries(mid, 1)["phys"][0])) >= ts:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _store_ts(self, phys: int) -> int:
        """A record's store time (-1 when its file is gone)."""
        d = self.dispatcher
        mf = d.commitlog.file_for(phys)
        if mf is None:
            d.commitlog.refresh()
            mf = d.commitlog.file_for(phys)
            if mf is None:
                return -1
        return message.store_ts_of(mf.mm, phys - mf.start)

