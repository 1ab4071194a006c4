"""The read side a reader process uses: consume queues and CommitLog records straight from the
mmaps (numpy views, no per-byte copies), per-queue offsets from shared memory, tag filtering by
hash in one vector op, and a blocking wait for newly dispatched messages (long polling).

Never reads past what is published: a queue's entries up to its shared max offset (written by the
dispatcher after the entries), records below ``dispatched``.  Owns nothing; writes only its own
slot's ``dispatch_wait`` flag.
"""
from __future__ import annotations

import bisect
import itertools
import logging
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from rocketbox.shm.layout import C, S
from rocketbox.shm.tables import QueueIndex
from rocketbox.store import message, quarantine, salvage
from rocketbox.store.consumequeue import ENTRY, ENTRY_SIZE, ConsumeQueue, file_size_for
from rocketbox.store.errors import StoreError
from rocketbox.store.mappedfile import MappedFileQueue
from rocketbox.store.salvage import TOMBSTONE_TAGS

log = logging.getLogger("rocketbox.reader")
FOUND, NO_NEW, NO_MATCHED, OFFSET_MOVED, NO_QUEUE = "FOUND", "NO_NEW_MSG", "NO_MATCHED_MSG", "OFFSET_MOVED", "NO_QUEUE"
# a filtered pull looks at up to this many consume-queue entries (RocketMQ's getMessage: at most
# max(16000, maxMsgNums * 20) bytes of its consume queue), then answers what it found, or
# NO_MATCHED_MESSAGE with the offset past them
FILTER_SCAN = 16000 // ENTRY_SIZE


class Stored(NamedTuple):
    """A stored record read whole: its bytes, then its fields (``message.record_fields``)."""
    raw: bytes
    head: message.Header
    body: bytes
    topic: bytes
    props: bytes


@dataclass
class Pulled:
    status: str
    next_offset: int
    min_offset: int
    max_offset: int
    parts: list              # byte views of the CommitLog: whole records in queue order, one view
                             # when all are adjacent under the cap, else one per record
    count: int = 0           # records in ``parts``
    last: int = 0            # CommitLog offset of the last of them

    def body(self) -> bytes:
        return b"".join(self.parts)

    def records(self) -> list[message.Record]:
        """The records decoded (tests, tools)."""
        return message.decode_records(self.body())


class StoreView:
    def __init__(self, cfg, shared, slot: int = -1, name: str = "reader"):
        """``slot``: this process's ring slot (from its RingClient), needed only for ``wait_new``;
        ``name``: who reports damage found by its reads."""
        self.cfg, self.sh, self.ctl, self.slot, self.name = cfg, shared, shared.control, slot, name
        self.verify_all, self.verify_cold = cfg.verifyBodyCrcOnRead == "all", cfg.verifyBodyCrcOnRead == "cold"
        self.damaged: set[int] = set()       # offsets of damaged records already reported
        self.cq_file_size = file_size_for(cfg.mappedFileSizeConsumeQueue)
        self.cqs: dict[tuple[str, int], ConsumeQueue] = {}
        self.in_memory_bytes = cfg.in_memory_bytes

    def open(self) -> "StoreView":
        self.commitlog = MappedFileQueue(self.cfg.commitlog_dir, self.cfg.mappedFileSizeCommitLog, False).load()
        self.queues = QueueIndex(self.sh.views, self.ctl)
        self.boot_written = int(self.ctl[C.BOOT_WRITTEN])     # (set by recovery, before any reader starts)
        self.retired = int(self.ctl[C.MIN_PHYS])
        return self

    def close(self) -> None:
        for cq in self.cqs.values():
            cq.close()
        self.cqs = {}
        self.commitlog.close()

    # ------------------------------------------------------------ offsets
    def offsets(self, topic: str, queue_id: int) -> tuple[int, int] | None:
        """(min, max) queue offsets as published, or None for a queue that has no messages yet."""
        s = self.queues.slot(topic, queue_id)
        if s is None:
            return None
        return int(self.queues.min_offsets[s]), int(self.queues.max_offsets[s])

    # ------------------------------------------------------------ reads
    def _cq(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.cqs.get((topic, queue_id))
        if cq is None:
            cq = self.cqs[(topic, queue_id)] = ConsumeQueue(self.cfg.root, topic, queue_id, self.cq_file_size, False)
            cq.files.load()
        return cq

    def entries(self, topic: str, queue_id: int, queue_offset: int, count: int) -> np.ndarray:
        """CQ entries [queue_offset, +count) capped at the published max, as a read-only view
        (may be shorter when the range crosses a CQ file: ask again from where it ends)."""
        off = self.offsets(topic, queue_id)
        if off is None:
            return np.empty(0, dtype=ENTRY)
        return self._entries(topic, queue_id, queue_offset, max(0, min(count, off[1] - queue_offset)))

    def _entries(self, topic: str, queue_id: int, queue_offset: int, count: int) -> np.ndarray:
        """``entries`` of a count already capped at the published max."""
        cq = self._cq(topic, queue_id)
        e = cq.entries(queue_offset, count)
        if len(e) < count and cq.files.file_for(queue_offset * ENTRY_SIZE) is None:
            cq.files.refresh()
            e = cq.entries(queue_offset, count)
        return e

    def tags(self, topic: str, queue_id: int, start: int, end: int) -> np.ndarray | None:
        """The tag hash codes of the queue's messages [start, end) (what a held pull's filter
        looks at, ``shm/holds.py``), or None when an entry cannot be read."""
        parts = []
        while start < end:
            e = self._entries(topic, queue_id, start, end - start)
            if not len(e):
                return None
            parts.append(e["tags"])
            start += len(e)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def record_ts(self, phys: int, size: int | None = None) -> int | None:
        """The store time of the CommitLog's record at ``phys``; None if there is none there."""
        try:
            rec = self.record(phys, size)
        except ValueError:
            return None
        return message.store_ts_of(rec, 0)

    def stored_at(self, topic: str, qid: int, offset: int) -> int | None:
        """The store time of the queue's message at ``offset``; None if it has none there."""
        e = self.entries(topic, qid, offset, 1)
        return self.record_ts(int(e["phys"][0]), int(e["size"][0])) if len(e) else None

    def record(self, phys: int, size: int | None = None) -> np.ndarray:
        """The stored record at ``phys`` as a read-only uint8 view of the mmap."""
        if size is None:
            head = self.span(phys, phys + 4)
            size = struct.unpack_from(">i", head.data, 0)[0]
        return self.span(phys, phys + size)

    def stored(self, phys: int, size: int | None = None) -> Stored | None:
        """The record that starts at CommitLog offset ``phys``: its bytes and fields; None when no
        record starts there, or the store no longer holds it (retention). Bounded by
        ``written``, which the writer moves before it answers a send, so what one process was
        told is stored, every process reads here (``dispatched`` follows later)."""
        if not int(self.ctl[C.MIN_PHYS]) <= phys < int(self.ctl[C.WRITTEN]):
            return None
        try:
            raw = self.record(phys, size).tobytes()
            head, body, topic, props = next(message.record_fields(raw, "record"))
        except (ValueError, StoreError, StopIteration):
            return None
        if head.phys_offset != phys:             # (not a record's start)
            return None
        return Stored(raw, head, body, topic, props)

    def queue_entries(self, topic: str, queue_id: int, start: int, end: int, chunk: int = 1024):
        """The consume queue's entries [start, end), a chunk at a time (up to what is published)."""
        while start < end:
            entries = self.entries(topic, queue_id, start, min(chunk, end - start))
            if not len(entries):
                return
            yield entries
            start += len(entries)

    def on_disk(self, phys: int) -> bool:
        """The record at ``phys`` is more than ``accessMessageInMemoryMaxRatio`` of RAM behind the
        CommitLog's end (store:DefaultMessageStore#checkInDiskByCommitOffset)."""
        return int(self.ctl[C.WRITTEN]) - phys > self.in_memory_bytes

    def pull(self, topic: str, queue_id: int, queue_offset: int, max_count: int,
             tag_codes: Sequence[int] | None = None, max_bytes: int = 256 * 1024,
             disk_limits: tuple[int, int] | None = None, keep: Callable[[bytes], bool] | None = None) -> Pulled:
        """PULL_MESSAGE's store side: up to ``max_count`` records from ``queue_offset``,
        filtered by tag hash (``None`` = all) in one vector op, within ``max_bytes`` (the first
        always).  ``disk_limits`` = (count, bytes): the limits of records ``on_disk``, message by
        message as RocketMQ's ``isTheBatchFull`` (``_disk_cut``). ``keep(properties)``: a filter
        on each record's properties too (an SQL92 subscription), record by record."""
        if self.ctl[C.MIN_PHYS] > self.retired:
            self._let_go()
        off = self.offsets(topic, queue_id)
        if off is None:
            return Pulled(NO_QUEUE, 0, 0, 0, [])
        lo, hi = off
        if queue_offset < lo or queue_offset > hi:
            return Pulled(OFFSET_MOVED, lo if queue_offset < lo else hi, lo, hi, [])
        if queue_offset == hi:
            return Pulled(NO_NEW, queue_offset, lo, hi, [])
        e = self._entries(topic, queue_id, queue_offset, min(max(FILTER_SCAN, max_count) if tag_codes or keep
                                                             else max_count, hi - queue_offset))
        if tag_codes is None and (e["tags"] == TOMBSTONE_TAGS).any():     # records lost to damage: skipped
            idx = np.flatnonzero(e["tags"] != TOMBSTONE_TAGS)
        elif tag_codes is not None:                  # (no tag code is TOMBSTONE_TAGS)
            idx = np.flatnonzero(np.isin(e["tags"].astype(np.int64), np.asarray(tag_codes, np.int64)))
        else:
            idx = None
        if keep is not None:
            idx = self._kept(e, np.arange(len(e)) if idx is None else idx, keep, max_count)
        if idx is not None:
            take, picked = idx[:max_count].tolist(), e[idx[:max_count]]
            matched = len(idx)
        else:                                        # no filter: the first entries, no index arrays
            picked = e[:max_count]
            take, matched = range(len(picked)), len(e)
        if not len(picked):
            return Pulled(NO_MATCHED, queue_offset + len(e), lo, hi, [])
        phys, sizes = picked["phys"], picked["size"]
        skip_to = None                               # past a damaged record, when one is dropped
        if self.verify_all or self.verify_cold and (int(phys[0]) < self.boot_written or self.on_disk(int(phys[0]))):
            k, why = self._verified(phys.tolist(), sizes.tolist())
            if k < len(picked):
                self._damaged(topic, queue_id, queue_offset + take[k], int(phys[k]), int(sizes[k]), why)
                skip_to = take[k] + 1
                if k == 0:
                    return Pulled(NO_MATCHED, queue_offset + skip_to, lo, hi, [])
                picked, phys, sizes = picked[:k], phys[:k], sizes[:k]
        start, end = int(phys[0]), int(phys[-1]) + int(sizes[-1])
        if disk_limits is not None and self.on_disk(start):          # (a queue's later records are newer)
            n = self._disk_cut(phys.tolist(), sizes.tolist(), max_bytes, disk_limits)
            parts = self._pieces(phys[:n].tolist(), sizes[:n].tolist(), 1 << 62)[0]
        elif end - start <= max_bytes and end - start == int(sizes.sum()):
            parts, n = [self.span(start, end)], len(picked)    # one run (a batch), under the cap
        else:
            parts, n = self._pieces(phys.tolist(), sizes.tolist(), max_bytes)
        if n < len(picked):
            scanned = take[n]                        # a cap stopped it here
        elif skip_to is not None:
            scanned = skip_to
        elif matched >= max_count:
            scanned = take[-1] + 1
        else:
            scanned = len(e)
        return Pulled(FOUND, queue_offset + scanned, lo, hi, parts, n, int(phys[n - 1]))

    def _kept(self, e: np.ndarray, idx: np.ndarray, keep: Callable[[bytes], bool], max_count: int) -> np.ndarray:
        """The entries of ``idx`` whose record's properties ``keep`` takes, up to ``max_count``
        (a record that does not read is not taken)."""
        out = []
        for k, phys, size in zip(idx.tolist(), e["phys"][idx].tolist(), e["size"][idx].tolist()):
            try:
                taken = keep(message.properties_at(self.record(phys, size)))
            except (ValueError, StoreError):
                taken = False
            if taken:
                out.append(k)
                if len(out) >= max_count:
                    break
        return np.asarray(out, dtype=np.int64)

    def _let_go(self) -> None:
        """Retention deleted the CommitLog below ``min_phys``: unmap those files, and the consume
        queues (mapped again when next read: the dispatcher deleted some of their files)."""
        self.retired = int(self.ctl[C.MIN_PHYS])
        files = self.commitlog.files
        while files and files[0].end <= self.retired:
            files.pop(0).close()
        for cq in self.cqs.values():
            cq.close()
        self.cqs = {}

    def _verified(self, phys: list[int], sizes: list[int]) -> tuple[int, str]:
        """How many of these records, from the first, pass a read's checks (``salvage.first_bad``:
        magic, sizes, PHYSICALOFFSET, body CRC), and what the next one failed."""
        mf = self.commitlog.file_for(phys[0])
        if mf is not None and phys[-1] + sizes[-1] <= mf.end:       # one file: offsets into its mmap
            bad, why = salvage.first_bad(memoryview(mf.mm), [a - mf.start for a in phys], sizes, phys)
        else:
            bad, why = -1, ""
            for i, (a, z) in enumerate(zip(phys, sizes)):
                if (found := salvage.first_bad(self.span(a, a + z).data, [0], [z], [a]))[0] == 0:
                    bad, why = i, found[1]
                    break
        return (len(phys), "") if bad < 0 else (bad, why)

    def _damaged(self, topic: str, queue_id: int, queue_offset: int, phys: int, size: int, why: str) -> None:
        """A record that fails a read's checks, left out of a pull: said once (by this process) in
        the log and the quarantine, with its bytes; the next stop (or start) makes it the tombstone
        recovery makes (``appliance.recovery.bury_found``)."""
        if phys in self.damaged or phys + size > self.ctl[C.WRITTEN]:
            return                    # (past the end: a slave's cut took it while the pull read)
        self.damaged.add(phys)
        mf = self.commitlog.file_for(phys)
        log.error("CommitLog: the record at offset %d (%s queue %d offset %d, %d bytes) fails its checks (%s): "
                  "left out of pulls, its queue goes on past it", phys, topic, queue_id, queue_offset, size, why)
        try:
            quarantine.note(self.cfg.root, self.name, {
                "offset": phys, "length": size, "file": mf.path if mf else None,
                "fileOffset": phys - mf.start if mf else None, "reason": why, "topic": topic,
                "queueId": queue_id, "queueOffset": queue_offset, "identity": "consume queue",
                "foundBy": self.name}, bytes(self.span(phys, phys + size)))
        except OSError as e:
            log.error("cannot write the quarantine entry of offset %d: %s", phys, e)

    def _disk_cut(self, phys: list[int], sizes: list[int], max_bytes: int, disk_limits: tuple[int, int]) -> int:
        """How many of these records (up to the pull's count, the first on disk) one pull returns,
        deciding record by record as RocketMQ's ``isTheBatchFull``: one on disk is taken while
        the batch holds fewer than ``disk_limits[0]`` and stays within ``disk_limits[1]`` bytes
        with it; one in memory (a pull may cross the line) within ``max_bytes``."""
        disk_count, disk_bytes = disk_limits
        line = int(self.ctl[C.WRITTEN]) - self.in_memory_bytes       # records below it are on disk
        n = total = 0
        for at, size in zip(phys, sizes):
            cap = disk_bytes if at < line else max_bytes
            if n and ((at < line and n >= disk_count) or total + size > cap):
                break
            n += 1
            total += size
        return n

    def _pieces(self, phys: list[int], sizes: list[int], max_bytes: int) -> tuple[list, int]:
        """Views of the records at ``phys`` (increasing, as a queue's are) within ``max_bytes``
        (the first always), one per record, and how many they are (a pull whose records are
        one run is answered with one view before this).  A queue's records are rarely adjacent,
        so runs are not sought: a loop merging them cost ~2.4 µs more per pull of 32 than
        these slices, which a writev takes as they are.  Cut from the file's memoryview when
        one file holds them all (a checked numpy view per piece cost ~60% more)."""
        if sum(sizes) > max_bytes:                   # the cap stops it (the first record always)
            n = max(1, bisect.bisect_right(list(itertools.accumulate(sizes)), max_bytes))
            phys, sizes = phys[:n], sizes[:n]
        end = phys[-1] + sizes[-1]
        mf = self.commitlog.file_for(phys[0])
        if mf is None or end > mf.end or end > self.ctl[C.WRITTEN]:     # across files, or not mapped yet:
            return [self.span(a, a + z) for a, z in zip(phys, sizes)], len(phys)   # each checked
        view, base = mf.view.data, mf.start
        return [view[a - base:a - base + z] for a, z in zip(phys, sizes)], len(phys)

    def span(self, start: int, end: int) -> np.ndarray:
        """CommitLog bytes [start, end) within one file, as a read-only uint8 view of the mmap."""
        if end > self.ctl[C.WRITTEN]:
            raise ValueError(f"offset {end} is past the committed CommitLog end")
        mf = self.commitlog.file_for(start)
        if mf is None:
            self.commitlog.refresh()
            mf = self.commitlog.file_for(start)
            if mf is None:
                raise ValueError(f"no CommitLog file holds offset {start} (deleted by retention?)")
        if end > mf.end:
            raise ValueError(f"CommitLog range [{start}, {end}) crosses the end of {mf.path}")
        return mf.view[start - mf.start:end - mf.start]

    # ------------------------------------------------------------ long polling
    def wait_new(self, seen_dispatched: int, waker, timeout_s: float) -> bool:
        """Block until ``dispatched`` passes ``seen_dispatched`` or the time-out; True if it did."""
        row = self.sh.slots[self.slot]
        row[S.DISPATCH_WAIT] = 1
        deadline = time.monotonic() + timeout_s
        try:
            while self.ctl[C.DISPATCHED] <= seen_dispatched:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                waker.wait(left)          # a post may be stale (a reply, an earlier pass): re-check
            return True
        finally:
            row[S.DISPATCH_WAIT] = 0

