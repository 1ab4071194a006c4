"""The dispatcher: builds ConsumeQueue and IndexFile entries from the CommitLog ("reput").

It follows ``written`` (published by the writer after the bytes are in place), parses each record
once, and per pass: appends every queue's new entries as one numpy block, adds every index key of
the pass to the IndexFile in one vector operation, publishes each touched queue's max offset,
then ``dispatched`` (that order: a reader that sees ``dispatched`` finds the entries), and posts
the wakers of slots waiting for new messages (long polls).

Prepared and rollback transaction records are not dispatched to consume queues; rollback records
are not indexed (FACTS §4.4).  Writes are idempotent, so recovery re-dispatches freely.
Sole writer of: consumequeue/, index/, queue max/min offsets, ``dispatched``, ``dispatched_ts``.
"""
from __future__ import annotations

import logging
import os
import struct
import time

import numpy as np

from shm.layout import C, S
from shm.tables import QueueIndex
from store import indexfile, message
from store.consumequeue import ConsumeQueue, file_size_for
from store.errors import CorruptData
from store.javahash import index_key_hashes, string_hash
from store.mappedfile import MappedFileQueue

log = logging.getLogger("rocketbox.dispatcher")
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
_I32 = struct.Struct(">i")
_H16 = struct.Struct(">h")


class DispatcherService:
    def __init__(self, cfg, shared, allocate_queue=None):
        """``allocate_queue(topic, queue_id) -> slot`` is given only during boot recovery, when no
        writer runs; in the role a record for an unknown queue is corruption."""
        self.cfg, self.sh, self.ctl = cfg, shared, shared.control
        self.allocate_queue = allocate_queue
        self.cqs: dict[tuple[str, int], ConsumeQueue] = {}
        self.cq_file_size = file_size_for(cfg.mappedFileSizeConsumeQueue)
        self.tag_codes: dict[bytes, int] = {}
        self.delays = cfg.delay_levels_ms
        self.max_pass_bytes = 16 * 1024 * 1024
        self.stop_requested = False
        self.index: indexfile.IndexFile | None = None

    def open(self) -> "DispatcherService":
        self.commitlog = MappedFileQueue(self.cfg.commitlog_dir, self.cfg.mappedFileSizeCommitLog, False).load()
        self.queues = QueueIndex(self.sh.views, self.ctl)
        if self.cfg.messageIndexEnable:
            files = indexfile.list_index_files(self.cfg.index_dir)
            if files:
                self.index = indexfile.IndexFile(files[-1], self.cfg.maxHashSlotNum, self.cfg.maxIndexNum, True).open()
        if self.allocate_queue is None:
            self.ctl[C.PID_DISPATCHER] = os.getpid()
        return self

    def close(self) -> None:
        for cq in self.cqs.values():
            cq.close()
        self.cqs = {}
        if self.index is not None:
            self.index.close()
            self.index = None
        self.commitlog.close()
        if self.allocate_queue is None:
            self.ctl[C.PID_DISPATCHER] = 0

    # ------------------------------------------------------------ one pass
    def step(self) -> bool:
        start, written = int(self.ctl[C.DISPATCHED]), int(self.ctl[C.WRITTEN])
        if start >= written:
            return False
        recs, end = self._parse(start, written)
        if recs:
            self._dispatch_queues(recs)
            if self.cfg.messageIndexEnable:
                self._dispatch_index(recs)
            self.ctl[C.DISPATCHED_TS] = recs[-1][4]
        self.ctl[C.DISPATCHED] = end
        self._wake_waiters()
        return True

    def _parse(self, pos: int, written: int):
        """Records in [pos, written), up to one pass's worth.  -> (list of tuples, end offset).
        Tuple: (phys, size, topic, queue_id, store_ts, queue_offset, sys_flag, tags, keys, uniq)."""
        out, budget = [], self.max_pass_bytes
        fsize = self.cfg.mappedFileSizeCommitLog
        mf = None
        while pos < written and budget > 0:
            if mf is None or not (mf.start <= pos < mf.end):
                mf = self.commitlog.file_for(pos)
                if mf is None:
                    self.commitlog.refresh()
                    mf = self.commitlog.file_for(pos)
                    if mf is None:
                        raise CorruptData("commitlog", pos, "no CommitLog file holds this committed offset")
            mm, at = mf.mm, pos - mf.start
            total, magic = struct.unpack_from(">ii", mm, at)
            if magic == message.BLANK_MAGIC:
                pos = mf.start + fsize
                continue
            if magic != message.MAGIC or total <= 0:
                raise CorruptData(mf.path, at, f"bad record (magic {magic & 0xFFFFFFFF:#x}, size {total}) below the written offset")
            sys_flag = _I32.unpack_from(mm, at + message.SYSFLAG_AT)[0]
            h = message.header_for(sys_flag)
            f = h.unpack_from(mm, at)
            body_len = f[-1]
            t_at = at + h.size + body_len
            tlen = mm[t_at]
            topic = mm[t_at + 1:t_at + 1 + tlen].decode()
            p_len = _H16.unpack_from(mm, t_at + 1 + tlen)[0]
            props = mm[t_at + 3 + tlen:t_at + 3 + tlen + p_len]
            out.append((pos, total, topic, f[3], f[11], f[5], sys_flag,
                        message.property_value(props, b"TAGS"), message.property_value(props, b"KEYS"),
                        message.property_value(props, b"UNIQ_KEY"), props))
            pos += total
            budget -= total
        return out, pos

    def _tags_code(self, topic: str, tags, props: bytes, store_ts: int) -> int:
        if topic == SCHEDULE_TOPIC:
            delay = message.property_value(props, b"DELAY")
            if delay is not None and delay.isdigit() and int(delay) > 0:
                level = min(int(delay), len(self.delays))
                return store_ts + self.delays[level - 1]
        if not tags:
            return 0
        code = self.tag_codes.get(tags)
        if code is None:
            code = self.tag_codes[tags] = string_hash(tags.decode())
        return code

    def _dispatch_queues(self, recs) -> None:
        groups: dict[tuple[str, int], list] = {}
        for r in recs:
            tx = r[6] & message.TX_MASK
            if tx == message.TX_PREPARED or tx == message.TX_ROLLBACK:
                continue
            groups.setdefault((r[2], r[3]), []).append(r)
        qmax, qmin = self.sh.views["queue_max"], self.sh.views["queue_min"]
        for key, rows in groups.items():
            cq = self._cq(key)
            phys = np.fromiter((r[0] for r in rows), np.int64, len(rows))
            size = np.fromiter((r[1] for r in rows), np.int64, len(rows))
            tags = np.fromiter((self._tags_code(r[2], r[7], r[10], r[4]) for r in rows), np.int64, len(rows))
            qoffs = np.fromiter((r[5] for r in rows), np.int64, len(rows))
            if len(rows) > 1 and not (np.diff(qoffs) == 1).all():
                raise CorruptData("commitlog", int(phys[0]), f"queue offsets of {key} are not dense in one pass")
            cq.put(int(qoffs[0]), phys, size, tags)
            slot = self._slot(key)
            qmin[slot] = cq.min_offset
            qmax[slot] = cq.max_offset

    def _cq(self, key) -> ConsumeQueue:
        cq = self.cqs.get(key)
        if cq is None:
            cq = self.cqs[key] = ConsumeQueue(self.cfg.root, key[0], key[1], self.cq_file_size, True).load()
        return cq

    def _slot(self, key) -> int:
        s = self.queues.slot(*key)
        if s is None:
            if self.allocate_queue is None:
                raise CorruptData("commitlog", -1, f"record for queue {key} that the writer never registered")
            s = self.allocate_queue(*key)
        return s

    def _dispatch_index(self, recs) -> None:
        keys, phys, ts = [], [], []
        skip_below = self.index.h("end_phys") if self.index is not None and self.index.h("index_count") > 1 else -1
        for r in recs:
            if r[0] <= skip_below or (r[6] & message.TX_MASK) == message.TX_ROLLBACK:
                continue
            topic = r[2]
            if r[9]:
                keys.append(f"{topic}#{r[9].decode()}")
                phys.append(r[0])
                ts.append(r[4])
            if r[8]:
                for k in r[8].decode().split(" "):
                    if k:
                        keys.append(f"{topic}#{k}")
                        phys.append(r[0])
                        ts.append(r[4])
        if not keys:
            return
        hashes = index_key_hashes(keys)
        phys_a, ts_a = np.array(phys, np.int64), np.array(ts, np.int64)
        done = 0
        while done < len(keys):
            if self.index is None or self.index.is_full:
                self._roll_index(int(ts_a[done]))
            done += self.index.put_batch(hashes[done:], phys_a[done:], ts_a[done:])

    def _roll_index(self, ts: int) -> None:
        if self.index is not None:
            self.index.flush()
            self.index.close()
        os.makedirs(self.cfg.index_dir, exist_ok=True)
        name = indexfile.name_for(ts)
        existing = indexfile.list_index_files(self.cfg.index_dir)
        if existing and os.path.basename(existing[-1]) >= name:   # names must keep increasing
            name = str(int(os.path.basename(existing[-1])) + 1)
        self.index = indexfile.IndexFile(os.path.join(self.cfg.index_dir, name), self.cfg.maxHashSlotNum,
                                         self.cfg.maxIndexNum, True).open(create=True)

    def _wake_waiters(self) -> None:
        slots = self.sh.slots
        for i in np.flatnonzero(slots[:, S.DISPATCH_WAIT] != 0).tolist():
            self.sh.slot_wakers[i].post()

    # ------------------------------------------------------------ loop
    def run(self) -> None:
        while not self.stop_requested:
            if not self.step():
                self.sh.dispatcher_waker.wait(1.0)
        while self.step():          # the writer has stopped: catch up with everything written
            pass
