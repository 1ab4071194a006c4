"""The dispatcher: builds ConsumeQueue and IndexFile entries from the CommitLog ("reput").

It follows ``written`` (published by the writer after the bytes are in place; on a slave it may
end inside a record, which then waits for the rest), parses each record once, and per pass:
appends every queue's new entries as one numpy block, adds every index key of the pass to the
IndexFile in one vector operation (a pass of at most ``FEW_RECORDS`` records does
the same record by record, without numpy), publishes each touched queue's max offset, then
``dispatched`` (that order: a reader that sees ``dispatched`` finds the entries), and posts the
wakers of slots waiting for new messages (long polls).

Prepared and rollback transaction records are not dispatched to consume queues; rollback records
are not indexed (FACTS §4.4).  Writes are idempotent, so recovery re-dispatches freely.
Sole writer of: consumequeue/, index/, queue max/min offsets, ``dispatched``, ``dispatched_ts``.
"""
from __future__ import annotations

import logging
import os
import struct
import time
from collections.abc import Sequence

import numpy as np

from rocketbox.dispatcher.retention import Retention
from rocketbox.shm.histogram import Histogram
from rocketbox.shm.layout import C, H, S
from rocketbox.shm.role import IDLE_S, LoopRole
from rocketbox.shm.tables import QueueIndex, append_queue
from rocketbox.store import fields, indexfile, message, propscan, salvage, timer, walk
from rocketbox.store.consumequeue import ConsumeQueue, file_size_for
from rocketbox.store.delay import SCHEDULE_TOPIC_BYTES, deliver_ts, level_of
from rocketbox.store.errors import CorruptData, no_space, out_of_files
from rocketbox.store.javahash import index_abs_one, string_hash
from rocketbox.store.javahashes import index_abs, segment_hashes, string_hashes
from rocketbox.store.mappedfile import MappedFileQueue
from rocketbox.store.timer import TIMER_TOPIC_BYTES

log = logging.getLogger("rocketbox.dispatcher")
_NAMES = (b"TAGS", b"KEYS", b"UNIQ_KEY", b"DELAY")     # the properties the dispatcher reads
_TOMBSTONE = salvage.TOMBSTONE_PROPERTY.encode()       # read too during recovery: only it writes tombstones
FEW_RECORDS = 48        # a pass of at most this many records goes record by record (_dispatch_few): the
                        # crossover, fitted from bench.paths (vector ~2.0M a pass + ~20k a record; few ~0.37M + ~55k)
_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


def waits(e: BaseException) -> bool:
    """A condition the dispatcher waits out, redoing the pass later (the disk full, no descriptor or
    mapping left): not a fault of the records."""
    return no_space(e) or out_of_files(e)


class Batch:
    """One pass's records as columns (``store/fields.py``: compiled, or gathered with numpy), and
    where each record's topic and properties lie in the file's view."""

    def __init__(self, mf, starts: np.ndarray, sizes: np.ndarray):
        cols = fields.fields(mf.view, starts)
        self.phys, self.size = mf.start + starts, sizes
        self.queue_id, self.queue_offset = cols[fields.QUEUE_ID], cols[fields.QUEUE_OFFSET]
        self.sys_flag, self.store_ts = cols[fields.SYS_FLAG], cols[fields.STORE_TS]
        self.topic_at, self.topic_len = cols[fields.TOPIC_AT], cols[fields.TOPIC_LEN]
        self.props_at, self.props_len = cols[fields.PROPS_AT], cols[fields.PROPS_LEN]
        self.view = mf.view


class DispatcherService(LoopRole):
    WAITS_OUT_TURNS = True
    NO_ROOM_MEANS = "sends are refused meanwhile, and what is in the CommitLog becomes consumable once there is room"
    NO_FILES_MEANS = ("messages stay in the CommitLog and become consumable once files can be opened again "
                      "(raise LimitNOFILE / ulimit -n, or vm.max_map_count)")

    def __init__(self, cfg, shared, allocate_queue=None, tombstones: Sequence[tuple[int, int]] = ()):
        """``allocate_queue(topic, queue_id) -> slot`` is given only during boot recovery, when no
        writer runs; in the role a record for an unknown queue is corruption, except on a slave,
        whose records come whole from the master: there the dispatcher is the first to read
        them, and takes their queues' slots itself (the slave's writer takes none).  ``tombstones``:
        (offset, length) of the damaged spans recovery replaced, sorted: a queue's records lost in
        one leave a gap in its offsets, filled with entries pointing at the tombstone."""
        super().__init__(log, "consume queues and index wait")
        self.cfg, self.sh, self.ctl = cfg, shared, shared.control
        self.waker = shared.dispatcher_waker
        self.recovering = allocate_queue is not None
        if allocate_queue is None and cfg.slave:
            def allocate_queue(topic: str, queue_id: int) -> int:
                return append_queue(shared.views, shared.control, topic.encode(), queue_id)
        self.allocate_queue = allocate_queue
        self.tombstones = list(tombstones)
        self.cqs: dict[tuple[str, int], ConsumeQueue] = {}
        self.cq_file_size = file_size_for(cfg.mappedFileSizeConsumeQueue)
        self.key_seeds: dict[bytes, int] = {}                 # topic -> hash of "topic#"
        self.tag_codes: dict[str, int] = {}                   # tag -> its hash (_dispatch_few)
        self.scheduled = False                                # this pass dispatched delayed messages or timers
        self.slot_of: dict[tuple[bytes, int], int] = {}      # (topic bytes, queue id) -> slot
        self.slot_key: dict[int, tuple[str, int]] = {}
        self.delays = cfg.delay_levels_ms
        self.max_pass_bytes = 16 * 1024 * 1024
        self.few_records = FEW_RECORDS
        self.short = False                                    # the last pass stopped short of written
        self.redone = 0                                       # passes redone record by record (_contain)
        self.sizes = Histogram(shared.views, H.MESSAGE_SIZE)
        self.put_sizes: list[np.ndarray] = []                 # sizes of the records this pass put in queues
        self.index: indexfile.IndexFile | None = None

    def open(self) -> "DispatcherService":
        self.commitlog = MappedFileQueue(self.cfg.commitlog_dir, self.cfg.mappedFileSizeCommitLog, False).load()
        self.queues = QueueIndex(self.sh.views, self.ctl)
        if self.cfg.messageIndexEnable:
            if not self.recovering:
                # a dispatcher started again after it died alone: the pass it died in may have put
                # part of a record's keys (an IndexFile filled between two of them), and the pass is
                # done again from ``dispatched``, past end_phys's skip; what it put goes, so the
                # record's keys are all put again (recovery trims the same way after a crash)
                indexfile.trim(self.cfg.index_dir, int(self.ctl[C.DISPATCHED]), self.cfg.maxHashSlotNum,
                               self.cfg.maxIndexNum)
            files = indexfile.list_index_files(self.cfg.index_dir)
            if files:
                self.index = indexfile.IndexFile(files[-1], self.cfg.maxHashSlotNum, self.cfg.maxIndexNum, True).open()
        self.retention = Retention(self)
        if not self.recovering:
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
        if not self.recovering:
            self.ctl[C.PID_DISPATCHER] = 0

    # ------------------------------------------------------------ one pass
    def step(self) -> bool:
        if self.ctl[C.CUT_SEQ] != self.ctl[C.CUT_DISPATCHED]:
            self._cut()                      # (before ``written`` is read: the writer lowered it first)
        start, written = int(self.ctl[C.DISPATCHED]), int(self.ctl[C.WRITTEN])
        if start >= written:
            return False
        mf, starts, sizes, end = self._parse(start, written)
        if end == start:                     # (a slave: the record at ``start`` is not all here yet)
            return False
        if starts:
            try:
                self.ctl[C.DISPATCHED_TS] = self._dispatch(mf, starts, sizes)
            except Exception as e:
                if waits(e):
                    raise
                self.ctl[C.DISPATCHED_TS] = self._contain(mf, starts, e)
        self.ctl[C.DISPATCHED] = end
        if self.put_sizes:
            self.sizes.observe_many(np.concatenate(self.put_sizes))
            self.put_sizes = []
        self.short = end < written           # stopped at a file end or max_pass_bytes
        self._wake_waiters()
        return True

    def _cut(self) -> None:
        """A slave's writer cut its CommitLog back (its master lost its tail: ``cut_to``), and waits
        for this before the bytes go: every consume-queue entry and index entry at or past the cut
        is dropped (files kept: readers map them), the queues' offsets and ``dispatched`` go back,
        then ``cut_dispatched`` says so.  A pass that began before the cut has ended: this runs
        first in a pass, and no later pass reads past the lowered ``written``."""
        seq, to = int(self.ctl[C.CUT_SEQ]), int(self.ctl[C.CUT_TO])
        if int(self.ctl[C.DISPATCHED]) > to:
            v, dropped = self.sh.views, 0
            for s in range(self.sh.queue_count()):
                if not v["queue_max"][s]:
                    continue
                cq = self._cq((v["queue_names"][s].decode(), int(v["queue_ids"][s])))
                if cq.max_phys > to:
                    before = cq.max_offset
                    cq.truncate_phys(to, running=True)
                    dropped += before - cq.max_offset
                    v["queue_min"][s], v["queue_max"][s] = cq.min_offset, cq.max_offset
            if self.index is not None:
                self.index.close()
                self.index = None
            if self.cfg.messageIndexEnable:
                indexfile.trim(self.cfg.index_dir, to, self.cfg.maxHashSlotNum, self.cfg.maxIndexNum)
                files = indexfile.list_index_files(self.cfg.index_dir)
                if files:
                    self.index = indexfile.IndexFile(files[-1], self.cfg.maxHashSlotNum, self.cfg.maxIndexNum,
                                                     True).open()
            log.warning("the CommitLog was cut back to offset %d (dispatched to %d): %d consume-queue entries "
                        "past it dropped, and the index's", to, int(self.ctl[C.DISPATCHED]), dropped)
            self.ctl[C.DISPATCHED] = to
        self.ctl[C.CUT_DISPATCHED] = seq

    def _dispatch(self, mf, starts: list[int], sizes: list[int]) -> int:
        """One pass's records, on the vector path or record by record.  -> the last one's store time."""
        if len(starts) <= self.few_records:
            return self._dispatch_few(mf, starts)
        batch = Batch(mf, np.array(starts, dtype=np.int64), np.array(sizes, dtype=np.int64))
        slots, tags, key_hashes, key_rows = self._columns(batch)
        self._dispatch_queues(batch, slots, tags)
        if key_hashes is not None:
            self._dispatch_index(key_hashes, batch.phys[key_rows], batch.store_ts[key_rows])
        return int(batch.store_ts[-1])

    def _contain(self, mf, starts: list[int], error: Exception) -> int:
        """A pass failed on something other than a condition that waits: no record may stop dispatch
        (a role that died here would replay the same pass forever).  The pass is redone one record
        at a time on the scalar path (writes are idempotent: what the failed pass wrote is skipped);
        a record that still fails is put in its queue without index keys (it stays consumable), or,
        when even that fails, left out; either is logged with its offset and counted
        (``dispatch_unindexed``, ``dispatch_unqueued``: ``appliance status``).  -> the last store time."""
        log.error("dispatch pass of %d records from CommitLog offset %d failed (%s: %s): redoing it one record "
                  "at a time", len(starts), mf.start + starts[0], type(error).__name__, error)
        self.redone += 1
        store_ts = 0
        for at in starts:
            try:
                store_ts = self._dispatch_few(mf, [at])
                continue
            except Exception as e:
                if waits(e):
                    raise
                why = f"{type(e).__name__}: {e}"
            try:
                store_ts = message.store_ts_of(mf.mm, at)
                self._queue_only(mf, at)
            except Exception as e:
                if waits(e):
                    raise
                self.ctl[C.DISPATCH_UNQUEUED] += 1
                log.error("record at CommitLog offset %d cannot be dispatched (%s), nor put in its queue (%s: %s): "
                          "left out; it stays in the CommitLog", mf.start + at, why, type(e).__name__, e)
                continue
            self.ctl[C.DISPATCH_UNINDEXED] += 1
            log.error("record at CommitLog offset %d cannot be dispatched (%s): put in its queue without index keys",
                      mf.start + at, why)
        return store_ts

    def _queue_only(self, mf, at: int) -> None:
        """A record's consume-queue entry alone, read from its fixed header: no index keys, and its tag
        code only if its properties parse (else 0: a tag subscriber filters it out, ``*`` gets it)."""
        mm = mf.mm
        size, _m, _c, queue_id, _f, qoff, _p, sys_flag = message.PREFIX.unpack_from(mm, at)
        tx = sys_flag & message.TX_MASK
        _ts_at, header = message.RECORD_SHAPES[(sys_flag >> 4) & 3]
        topic_at = at + header + _I32.unpack_from(mm, at + header - 4)[0]
        props_at = topic_at + 3 + mm[topic_at]
        slot = self._slot(bytes(mm[topic_at + 1:props_at - 2]), queue_id)
        if tx == message.TX_PREPARED or tx == message.TX_ROLLBACK:
            return
        try:
            tag = message.parse_properties(
                bytes(mm[props_at:props_at + _I16.unpack_from(mm, props_at - 2)[0]]).decode("utf-8", "replace")
            ).get("TAGS")
            code = self._tag_code(tag) if tag else 0
        except Exception:
            code = 0
        try:
            self._put_queue(slot, qoff, [mf.start + at], [size], [code])
        except CorruptData:                     # its QUEUEOFFSET is not its queue's next (a damaged header)
            cq = self._cq(self.slot_key[slot])
            log.error("record at CommitLog offset %d says queue offset %d; %s/%d's next is %d: put there",
                      mf.start + at, qoff, cq.topic, cq.queue_id, cq.max_offset)
            self._put_queue(slot, cq.max_offset, [mf.start + at], [size], [code])

    def _parse(self, pos: int, written: int):
        """Records in [pos, written) (one pass's worth, within one CommitLog file).
        -> (the file, where each record starts in it, each record's size, offset where the pass ends)."""
        fsize = self.cfg.mappedFileSizeCommitLog
        mf = self.commitlog.file_for(pos)
        if mf is None:
            self.commitlog.refresh()
            mf = self.commitlog.file_for(pos)
            if mf is None:
                first = self.commitlog.files[0].start if self.commitlog.files else written
                if pos < first:              # (a slave whose CommitLog starts where its master's last file did)
                    return None, [], [], first
                raise CorruptData("commitlog", pos, "no CommitLog file holds this committed offset")
        mm, base = mf.mm, mf.start
        assert mm is not None                    # (an open file's map)
        stop = written - base                    # a record must end by here: on a slave, ``written`` is where
        at = pos - base                          # the master's bytes end
        starts, sizes, at, bad = walk.records(mm, at, stop, min(stop, fsize, at + self.max_pass_bytes), fsize,
                                              message.MIN_RECORD_SIZE)
        if bad >= 0:
            total, magic = message.HEAD.unpack_from(mm, bad)
            raise CorruptData(mf.path, bad, f"bad record (magic {magic & 0xFFFFFFFF:#x}, size {total}) below the "
                                            "written offset")
        return mf, starts, sizes, base + at

    def _columns(self, b: "Batch"):
        """Each record's queue slot (-1: not dispatched to a queue) and tag code, and the index
        keys of the pass as (hashes, record rows), in a fixed number of vector operations."""
        tx = b.sys_flag & message.TX_MASK
        group, group_slot, group_topic, group_seed = self._groups(b)
        queued = (tx != message.TX_PREPARED) & (tx != message.TX_ROLLBACK)
        slots = np.where(queued, group_slot[group], -1)
        p, found = propscan.scan(b.view, b.props_at, b.props_len, _NAMES + (_TOMBSTONE,) if self.tombstones else _NAMES)
        tags = np.zeros(len(slots), dtype=np.int64)
        t = found[b"TAGS"]
        tags[t.rows] = segment_hashes(p.buf, t.starts, t.lens)
        if self.tombstones:
            tags[found[_TOMBSTONE].rows] = salvage.TOMBSTONE_TAGS
        d = found[b"DELAY"]
        for i, row in enumerate(d.rows.tolist()):            # delayed messages: rare, one by one
            if group_topic[group[row]] == SCHEDULE_TOPIC_BYTES:
                delay = bytes(p.buf[d.starts[i]:d.starts[i] + d.lens[i]])
                tags[row] = self._deliver_ts(delay, int(b.store_ts[row]), int(tags[row]))
                self.scheduled = True
        timers = [g for g, name in enumerate(group_topic) if name == TIMER_TOPIC_BYTES]
        if timers:                                           # timers and their cancellations
            self.scheduled = True
            offs = p.offs
            for row in np.flatnonzero(np.isin(group, timers)).tolist():
                tags[row] = timer.tag_code(bytes(p.buf[offs[row]:offs[row + 1]]), int(tags[row]))
        if not self.cfg.messageIndexEnable:
            return slots, tags, None, None
        skip_below = self.index.h("end_phys") if self.index is not None and self.index.h("index_count") > 1 else -1
        indexed = (b.phys > skip_below) & (tx != message.TX_ROLLBACK)
        u, k = found[b"UNIQ_KEY"], propscan.split(p, found[b"KEYS"], ord(" "))
        rows, starts, lens = (np.concatenate(pair) for pair in zip(u, k))
        order = np.argsort(rows, kind="stable")              # record order; a record's UNIQ_KEY first
        order = order[indexed[rows[order]]]
        rows = rows[order]
        return slots, tags, index_abs(segment_hashes(p.buf, starts[order], lens[order], group_seed[group[rows]])), rows

    def _groups(self, b: "Batch"):
        """Group the pass's records by (topic, queue id), comparing the topic bytes themselves
        (``store/fields.groups``).  -> (group of each record, and per group: queue slot, topic,
        hash of ``topic#``)."""
        group, first = fields.groups(b.view, b.topic_at, b.topic_len, b.queue_id)
        slot, topic, seed = [], [], []
        mv = b.view.data
        for r in first:
            at = int(b.topic_at[r]) + 1
            name = bytes(mv[at:at + int(b.topic_len[r])])
            slot.append(self._slot(name, int(b.queue_id[r])))
            topic.append(name)
            seed.append(self._key_seed(name))
        return group, np.array(slot, dtype=np.int64), topic, np.array(seed, dtype=np.int32)

    def _dispatch_few(self, mf, starts: list[int]) -> int:
        """A small pass: what ``_columns``, ``_dispatch_queues`` and ``_dispatch_index`` do, one
        record at a time in plain Python, writing the same bytes.  Below ``few_records`` records
        the vector path's fixed cost (some hundred numpy calls, and at low rates their cold
        caches) outweighs the work.  -> the last record's store time."""
        mm, base = mf.mm, mf.start
        queues: dict[int, tuple[int, list, list, list]] = {}    # slot -> (first queue offset, phys, sizes, tags)
        keys, seeds, key_phys, key_ts = [], [], [], []
        indexing = self.cfg.messageIndexEnable
        skip_below = self.index.h("end_phys") if indexing and self.index is not None and self.index.h("index_count") > 1 else -1
        prefix, i16, i32, i64, parse = message.PREFIX.unpack_from, _I16.unpack_from, _I32.unpack_from, \
            _I64.unpack_from, message.parse_properties
        shapes = message.RECORD_SHAPES
        for at in starts:
            size, _m, _c, queue_id, _f, qoff, _p, sys_flag = prefix(mm, at)
            phys, (ts_at, header) = base + at, shapes[(sys_flag >> 4) & 3]
            (store_ts,) = i64(mm, at + ts_at)
            topic_at = at + header + i32(mm, at + header - 4)[0]
            props_at = topic_at + 3 + mm[topic_at]
            topic = mm[topic_at + 1:props_at - 2]
            props = parse(mm[props_at:props_at + i16(mm, props_at - 2)[0]].decode("utf-8", "replace"))
            slot, tx = self._slot(topic, queue_id), sys_flag & message.TX_MASK
            if tx != message.TX_PREPARED and tx != message.TX_ROLLBACK:
                tag = props.get("TAGS")
                code = self._tag_code(tag) if tag else 0
                delay = props.get("DELAY")
                if delay is not None and topic == SCHEDULE_TOPIC_BYTES:
                    code = self._deliver_ts(delay.encode(), store_ts, code)
                    self.scheduled = True
                elif topic == TIMER_TOPIC_BYTES:
                    code = timer.tag_code(bytes(mm[props_at:props_at + i16(mm, props_at - 2)[0]]), code)
                    self.scheduled = True
                if self.tombstones and salvage.TOMBSTONE_PROPERTY in props:
                    code = salvage.TOMBSTONE_TAGS
                q = queues.get(slot)
                if q is not None and qoff != q[0] + len(q[1]):
                    if not self.tombstones:
                        raise CorruptData("commitlog", q[1][-1], f"queue offsets of {self.slot_key[slot]} "
                                                                 "are not dense in one pass")
                    self._put_queue(slot, *q)          # up to the gap; _put_queue fills it
                    q = None
                if q is None:
                    q = queues[slot] = (qoff, [], [], [])
                q[1].append(phys)
                q[2].append(size)
                q[3].append(code)
            if indexing and phys > skip_below and tx != message.TX_ROLLBACK:
                seed = self._key_seed(topic)
                for key in [props.get("UNIQ_KEY", ""), *props.get("KEYS", "").split(" ")]:
                    if key:
                        keys.append(key)
                        seeds.append(seed)
                        key_phys.append(phys)
                        key_ts.append(store_ts)
        for slot, (first, phys_l, sizes, tags) in queues.items():
            self._put_queue(slot, first, phys_l, sizes, tags)
        if keys:
            self._dispatch_index(list(map(index_abs_one, string_hashes(keys, seeds))), key_phys, key_ts,
                                 indexfile.PUT_FEW)
        return store_ts

    def _deliver_ts(self, delay: bytes, store_ts: int, default: int) -> int:
        """Delayed message in SCHEDULE_TOPIC_XXXX: its tag code is the delivery time."""
        try:
            level = level_of(delay)
        except ValueError:
            return default
        return deliver_ts(store_ts, level, self.delays) if level > 0 else default

    def _tag_code(self, tag: str) -> int:
        """A tag's hash code, remembered: a topic's messages carry a few tags, over and over."""
        code = self.tag_codes.get(tag)
        if code is None:
            if len(self.tag_codes) >= 4096:
                self.tag_codes.clear()
            code = self.tag_codes[tag] = string_hash(tag)
        return code

    def _key_seed(self, topic: bytes) -> int:
        """Hash of ``topic#``, where every index key of the topic's records starts."""
        h = self.key_seeds.get(topic)
        return h if h is not None else self.key_seeds.setdefault(topic, string_hash(topic.decode() + "#"))

    def _slot(self, topic: bytes, queue_id: int) -> int:
        s = self.slot_of.get((topic, queue_id))
        if s is not None:
            return s
        key = (topic.decode(), queue_id)
        s = self.queues.slot(*key)
        if s is None:
            if self.allocate_queue is None:
                raise CorruptData("commitlog", -1, f"record for queue {key} that the writer never registered")
            s = self.allocate_queue(*key)
        self.slot_of[(topic, queue_id)] = s
        self.slot_key[s] = key
        return s

    def _dispatch_queues(self, b: "Batch", slots: np.ndarray, tags: np.ndarray) -> None:
        keep = np.flatnonzero(slots >= 0)
        if keep.size == 0:
            return
        order = keep[np.argsort(slots[keep], kind="stable")]
        s_sorted, qoffs = slots[order], b.queue_offset[order]
        phys, size, tag = b.phys[order], b.size[order], tags[order]       # each queue's run is a slice now
        same = s_sorted[1:] == s_sorted[:-1]
        gaps = same & (qoffs[1:] - qoffs[:-1] != 1)
        if gaps.any() and not self.tombstones:
            i = int(np.flatnonzero(gaps)[0])
            raise CorruptData("commitlog", int(phys[i]), f"queue offsets of {self.slot_key[int(s_sorted[i])]} "
                                                         "are not dense in one pass")
        bounds = [0, *(np.flatnonzero(~same | gaps) + 1).tolist(), len(order)]     # (a run per gap: _put_queue fills it)
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            self._put_queue(int(s_sorted[lo]), int(qoffs[lo]), phys[lo:hi], size[lo:hi], tag[lo:hi])

    def _put_queue(self, slot: int, queue_offset: int, phys, size, tags) -> None:
        """One queue's entries of the pass, then its published max and min offsets."""
        cq = self._cq(self.slot_key[slot])
        if queue_offset > cq.max_offset and self.tombstones and cq.files.files:
            self._fill_gap(cq, queue_offset, int(phys[0]))
        before = cq.max_offset
        cq.put(queue_offset, phys, size, tags)
        v = self.sh.views
        v["queue_min"][slot] = cq.min_offset
        v["queue_max"][slot] = cq.max_offset
        if (new := cq.max_offset - before) > 0:        # (a redone pass finds its first entries there: not counted again)
            added = np.asarray(size[len(size) - min(new, len(size)):], dtype=np.int64)
            v["queue_bytes"][slot] += int(added.sum())
            self.put_sizes.append(added)              # (message_size: observed once the pass is published)

    def _fill_gap(self, cq: ConsumeQueue, queue_offset: int, phys: int) -> None:
        """Recovery: the queue's records before ``queue_offset`` were lost in a damaged span; their
        entries point at the last tombstone between the queue's last entry and ``phys`` (readers
        skip it).  With no tombstone there, the gap stays an error (``ConsumeQueue.put``)."""
        between = [t for t in self.tombstones if cq.max_phys <= t[0] < phys]
        if not between:
            return
        at, length = between[-1]
        n = queue_offset - cq.max_offset
        log.error("queue %s/%d: offsets %d-%d were lost in the damaged span at %d: their entries point at its "
                  "tombstone", cq.topic, cq.queue_id, cq.max_offset, queue_offset - 1, at)
        cq.put(cq.max_offset, [at] * n, [length] * n, [salvage.TOMBSTONE_TAGS] * n)

    def _cq(self, key) -> ConsumeQueue:
        cq = self.cqs.get(key)
        if cq is None:
            cq = self.cqs[key] = ConsumeQueue(self.cfg.root, key[0], key[1], self.cq_file_size, True).load()
        return cq

    def _dispatch_index(self, hashes, phys, store_ts, put=indexfile.PUT_MANY) -> None:
        """Add the pass's keys (``put_few`` takes lists), on to a new IndexFile when one is full."""
        done = 0
        while done < len(hashes):
            if self.index is None or self.index.is_full:
                self._roll_index(int(store_ts[done]))
            done += put(self.index, hashes[done:], phys[done:], store_ts[done:])

    def _roll_index(self, ts: int) -> None:
        if self.index is not None:
            self.index.flush()
            self.index.close()
            self.index = None                   # (if the next one cannot be made, it is made next pass)
        os.makedirs(self.cfg.index_dir, exist_ok=True)
        name = indexfile.name_for(ts)
        existing = indexfile.list_index_files(self.cfg.index_dir)
        if existing and os.path.basename(existing[-1]) >= name:   # names must keep increasing
            name = str(int(os.path.basename(existing[-1])) + 1)
        self.index = indexfile.IndexFile(os.path.join(self.cfg.index_dir, name), self.cfg.maxHashSlotNum,
                                         self.cfg.maxIndexNum, True).open(create=True)

    def _pace(self, until: float) -> None:
        """Under load, let writes gather before the next pass (each pass costs a fixed ~0.5 ms of
        numpy calls, so small passes waste the box), unless a long poll waits for new messages
        or the last pass stopped short of ``written`` (catching up: no pause)."""
        left = until - time.monotonic()
        if left > 0 and not self.short and not (self.sh.slots[:, S.DISPATCH_WAIT] == 1).any():
            time.sleep(left)

    def _wake_waiters(self) -> None:
        """Post every slot waiting for new messages; one waiting for delayed ones only (the
        scheduler: ``DISPATCH_WAIT`` 2) only when the pass dispatched some."""
        slots = self.sh.slots
        want = slots[:, S.DISPATCH_WAIT]
        for i in np.flatnonzero((want == 1) | (want == 2) & self.scheduled).tolist():
            self.sh.slot_wakers[i].post()
        self.scheduled = False

    # ------------------------------------------------------------ loop
    def work(self) -> bool:
        """Retention's share (``dispatcher/retention.py``), then ``step``. -> whether it dispatched.
        A full disk, or a process out of descriptors or mappings, is waited out by the loop
        (``LoopRole.guarded_turn``): a consume-queue or index file that cannot be made or opened
        leaves ``dispatched`` where it was (the pass is redone, idempotently, once it can be); the
        messages are safe in the CommitLog meanwhile. Anything else ends the process, said once."""
        try:
            self.retention.follow()
            return self.step()
        except Exception as e:
            if not waits(e):
                log.critical("dispatch stopped at CommitLog offset %d: %s: %s", int(self.ctl[C.DISPATCHED]),
                             type(e).__name__, e)
            raise

    def waiting(self, full: bool) -> None:
        self.ctl[C.DISPATCH_NO_ROOM] = int(full)

    def turn(self) -> float:
        started = time.monotonic()
        if not self.work():
            return IDLE_S
        pace_s = self.cfg.dispatchPaceMs / 1000
        if pace_s and not self.stop_requested:
            self._pace(started + pace_s)
        return 0.0

    def drain(self) -> None:
        while self.guarded_turn() == 0.0:      # the writer has stopped: catch up with everything written
            pass
