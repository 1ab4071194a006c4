"""Where the next record goes, and the put path that puts it there: the writer's CommitLog end,
every queue's next offset, and the steps that turn a pass's PUT slabs into stored records.

A pass's slabs go through the same steps on one of two paths:

    1. check      each request's topic and queue (``_queue_status``, one rule for both paths)
                  and its records' sizes and headers
    2. admit      a queue's first write takes a queue slot, while any are free (``_admit``)
    3. reserve    the CommitLog blocks the records may reach (``_ensure_files``)
    4. place      queue offsets, physical offsets (BLANK-padding a full file's tail), the store
                  timestamp patched into the records, the records copied into the CommitLog
    5. reply      one PUT_RESULT per slab

The vector path does 1 and 4 with a handful of numpy operations over every record of the pass;
its fixed cost (~100 numpy calls, ~0.5 ms here) would be most of a pass of a few requests, so
those (at most ``FEW_REQUESTS``) take the scalar path, request by request.  Both give the same
bytes, offsets and replies (the writer tests run both).
"""
from __future__ import annotations

import itertools
import logging
import struct
from typing import Any

import numpy as np

from rocketbox.shm import protocol as P
from rocketbox.shm.layout import C, T
from rocketbox.shm.tables import append_queue, queue_nums_of
from rocketbox.store import message
from rocketbox.store.errors import Condition, DiskFull
from rocketbox.store.mappedfile import MappedFileQueue

log = logging.getLogger("rocketbox.writer")
COMMITLOG_RESERVE_AHEAD = 1 << 20   # CommitLog blocks reserved beyond a slab's reach: one fallocate a MiB
FEW_REQUESTS = 48            # passes of at most this many requests take the scalar path: the crossover, fitted
                             # from bench.paths (scalar ~153k a pass + ~28k a request; vector ~1.3M + ~4k a record)
QID_BITS = 20                # a queue's key: (topic index << QID_BITS) | queue id
QID_MASK = (1 << QID_BITS) - 1
_BYTE = np.arange(8)
_QQ, _Q = struct.Struct(">qq"), struct.Struct(">q")   # QQ: queue then physical offset
assert message.PHYS_OFFSET_AT == message.QUEUE_OFFSET_AT + _Q.size    # one ">qq" patches both


def _be64(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=">i8").view(np.uint8).reshape(-1, 8)


# whether records of a sysflag take a queue offset, by sysflag & TX_MASK: prepared and rolled-back
# transaction records take none (they are not consumable)
_QUEUED = tuple(tx not in (message.TX_PREPARED, message.TX_ROLLBACK) for tx in range(message.TX_MASK + 1))


def refused(requests, status: int):
    """The PUT_RESULT of a slab whose every request is refused with ``status``."""
    return P.PUT_RESULT, P.result_bytes([(rid, status, qid, 0, 0, 0, 0, 0, 0) for rid, qid in
                                         zip(requests["req_id"].tolist(), requests["queue_id"].tolist())], [])


class Appender:
    """The writer's append state, which no other process writes: the CommitLog's end
    (``write_pos``, and how far its blocks are reserved), each queue's next offset by queue slot,
    and the (topic index, queue id) -> queue slot map."""

    def __init__(self, cfg, shared, commitlog: MappedFileQueue, topic_index: dict[str, int]):
        """``topic_index``: topic name -> index, to key the queue slots recovery left; the
        dispatcher must have caught up with the CommitLog (queue offsets are its max offsets)."""
        self.cfg, self.sh, self.ctl = cfg, shared, shared.control
        self.commitlog, self.file_size = commitlog, cfg.mappedFileSizeCommitLog
        self.no_room = Condition(log, "refusing appends (SERVICE_NOT_AVAILABLE): no room for the next CommitLog file")
        self.write_pos = int(self.ctl[C.WRITTEN])
        self.reserved_to = 0          # CommitLog blocks are reserved up to here (``_ensure_files``)
        n = shared.queue_count()
        self.next_qoff = np.zeros(len(shared.views["queue_max"]), dtype=np.int64)
        self.next_qoff[:n] = shared.views["queue_max"][:n]
        names, ids = shared.views["queue_names"][:n], shared.views["queue_ids"][:n]
        tidx = np.array([topic_index.get(nm.decode(), -1) for nm in names], dtype=np.int64)
        keys = (tidx << QID_BITS) | ids.astype(np.int64)
        order = np.argsort(keys)
        self.slot_keys, self.slot_of_key = keys[order], order.astype(np.int64)   # sorted, for the vector path
        self.slot_of = dict(zip(self.slot_keys.tolist(), self.slot_of_key.tolist()))   # the same, scalar path
        self.new_keys: list[int] = []     # queues in ``slot_of`` not yet in the sorted arrays (``_merge_new``)
        self.slave = cfg.slave  # its CommitLog is the master's: ``replicate``, never ``put``

    # ------------------------------------------------------------ a pass
    def put(self, payloads: list, ts: int) -> list:
        """Append the records of a pass's PUT slabs, stamped ``ts``; -> the reply to each slab
        (None for one nobody can be answered for)."""
        replies: list = [None] * len(payloads)
        slabs = []
        for j, payload in enumerate(payloads):
            try:
                slabs.append((j, *P.parse_slab(payload)[:3]))
            except P.BadSlab as e:
                log.error("PUT slab refused whole: %s", e)
                if e.requests is not None:
                    replies[j] = refused(e.requests, P.SYSTEM_ERROR)
        if self.ctl[C.STOPPING] or self.slave:
            for j, requests, _sizes, _recs in slabs:
                replies[j] = refused(requests, P.SERVICE_NOT_AVAILABLE)
        elif slabs:
            few = sum([len(requests) for _, requests, _, _ in slabs]) <= FEW_REQUESTS
            for j, reply in (self._put_few if few else self._put_many)(slabs, ts):
                replies[j] = reply
        return replies

    def replicate(self, offset: int, data: np.ndarray) -> int:
        """A slave's append: ``data``, its master's CommitLog bytes from ``offset``, written as they
        are (split at file ends; the master's chunks keep within a file, a run of them may not).
        ``offset`` must be the CommitLog's end (else P.MISPLACED, nothing written); it may be
        within a record: the dispatcher waits for the rest (``written`` is not a record boundary
        on a slave).  An empty CommitLog may start at a file start past 0 (a 4.9.8 master sends an
        empty slave its last file only).  P.SERVICE_NOT_AVAILABLE when the disk cannot hold the bytes."""
        if offset != self.write_pos:
            if self.write_pos or self.commitlog.files or offset % self.file_size:
                return P.MISPLACED
            self.write_pos = offset
        if not self._ensure_files(len(data)):
            return P.SERVICE_NOT_AVAILABLE
        at, end, fsize = offset, offset + len(data), self.file_size
        while at < end:
            n = min(end, (at // fsize + 1) * fsize) - at
            self.commitlog.write(at, data[at - offset:at - offset + n])
            at += n
        self.write_pos = end
        return P.SUCCESS

    def read(self, at: int, end: int) -> bytes:
        """The CommitLog's bytes [at, end), which may span files."""
        out = []
        while at < end:
            mf = self.commitlog.file_for(at)
            if mf is None:
                raise ValueError(f"no CommitLog file holds offset {at}")
            n = min(end, mf.end) - at
            out.append(bytes(mf.mm[at - mf.start:at - mf.start + n]))
            at += n
        return b"".join(out)

    def cut(self, offset: int) -> None:
        """A slave's cut, once nobody reads past ``offset`` (``WriterService._cut``): every byte from
        there reads as zero, files kept (``MappedFileQueue.cut``), and the end goes back to it."""
        self.commitlog.cut(offset)
        self.write_pos, self.reserved_to = offset, 0

    # ------------------------------------------------------------ steps both paths share
    def _queue_status(self, tidx: int, qid: int, topics: dict) -> int:
        """Step 1's rule for a request's queue: SUCCESS, TOPIC_NOT_EXIST (no such topic, or
        deleted), SYSTEM_ERROR (no such queue).  ``topics``: the pass's topic rows read so far."""
        topic = topics.get(tidx)
        if topic is None:
            if not 0 <= tidx < self.sh.topic_count():
                return P.TOPIC_NOT_EXIST
            row = self.sh.views["topic_meta"][tidx].tolist()
            topic = topics[tidx] = (row[T.LIVE] == 1, queue_nums_of(row))
        if not topic[0]:
            return P.TOPIC_NOT_EXIST
        return P.SUCCESS if 0 <= qid < topic[1] else P.SYSTEM_ERROR

    def _queue_room(self) -> int:
        """Queue slots still free: while a pass has no more accepted requests than this, even
        one new queue per request fits and step 2 has nothing to do."""
        return len(self.sh.views["queue_ids"]) - int(self.ctl[C.QUEUE_COUNT])

    def _admit(self, keys: list[int]) -> list[bool]:
        """Step 2: whether each checked request (by queue key, in pass order) may append.  A
        queue's first write takes a free queue slot; once none is left, requests to queues new
        in this pass are refused (QUEUES_FULL), first come first served, and the writer never
        stops in the middle of a pass on it."""
        room = self._queue_room()
        new: set[int] = set()
        admitted: list[bool] = []
        for key in keys:
            if key not in self.slot_of and key not in new:
                if len(new) >= room:
                    admitted.append(False)
                    continue
                new.add(key)
            admitted.append(True)
        return admitted

    def _ensure_files(self, nbytes: int) -> bool:
        """Step 3: create every CommitLog file the next ``nbytes`` may reach (plus one roll),
        with blocks reserved behind them, before any byte is placed; False when the disk cannot
        hold them (the pass's appends are refused, not torn)."""
        last = self.write_pos + nbytes + self.cfg.max_record_size + message.END_FILE_MIN_BLANK
        if last <= self.reserved_to:                  # one comparison while inside the reservation
            self.no_room.cleared()
            return True
        # a MiB ahead, but within the file ``last`` falls in: a file made ahead of need would be
        # an empty newest file, and recovery after a clean stop starts 3 files from the newest
        ahead = min(last + COMMITLOG_RESERVE_AHEAD, last + (-last % self.file_size))
        try:
            self.commitlog.reserve(self.write_pos, ahead)
            self.reserved_to = ahead
        except DiskFull as e:
            self.no_room.met(e)
            return False
        self.no_room.cleared()
        return True

    def _slot(self, key: int) -> int:
        """The queue slot of a queue key, taken now if this is the queue's first write (the sorted
        arrays get it later, with the others new since: ``_merge_new``)."""
        slot = self.slot_of.get(key)
        if slot is None:
            tidx, qid = key >> QID_BITS, key & QID_MASK
            slot = append_queue(self.sh.views, self.ctl, self.sh.views["topic_names"][tidx], qid)
            self.next_qoff[slot] = 0
            self.slot_of[key] = slot
            self.new_keys.append(key)
        return slot

    def _merge_new(self) -> None:
        """The queues written for the first time since the last merge into the vector path's
        sorted arrays, in one insert: one per new queue copied both arrays, 98 µs a queue in the
        writer at 100,000 queues (bench.metadata's sends to new queues)."""
        if not self.new_keys:
            return
        keys = np.sort(np.array(self.new_keys, dtype=np.int64))
        slots = np.array([self.slot_of[k] for k in keys.tolist()], dtype=np.int64)
        at = np.searchsorted(self.slot_keys, keys)
        self.slot_keys = np.insert(self.slot_keys, at, keys)
        self.slot_of_key = np.insert(self.slot_of_key, at, slots)
        self.new_keys = []

    def _blank_to(self, pos: int, file_end: int) -> int:
        """The rest of a full file from ``pos`` is a BLANK filler; the next file starts at its end."""
        self.commitlog.write(pos, message.BLANK.pack(file_end - pos, message.BLANK_MAGIC))
        return file_end

    # ------------------------------------------------------------ the scalar path
    def _put_few(self, slabs: list, ts: int) -> list:
        """The steps request by request, on Python lists and ``struct`` (a pass of a few)."""
        few, accepted, nbytes = [], 0, 0
        topics: dict[int, Any] = {}
        for slab in slabs:
            f = self._check_few(_Few(*slab), topics)
            few.append(f)
            accepted, nbytes = accepted + f.accepted, nbytes + len(f.recs)
        if accepted > self._queue_room():
            self._refuse_few(few, self._admit([key for f in few for key in f.keys if key >= 0]), P.QUEUES_FULL)
        if accepted and not self._ensure_files(nbytes):
            self._refuse_few(few, [], P.SERVICE_NOT_AVAILABLE)
        return [(f.j, self._place_few(f, ts)) for f in few]

    def _check_few(self, f: "_Few", topics: dict) -> "_Few":
        """Step 1 for one slab: each request's status, and its queue key when it may append."""
        min_size, max_size, head, magic = message.MIN_RECORD_SIZE, self.cfg.max_record_size, message.HEAD.unpack_from, message.MAGIC
        recs, at = f.recs, 0
        # records whose size is out of bounds, or not their own TOTALSIZE, or whose MAGIC is wrong
        bad = [i for i, (st, z) in enumerate(zip(f.starts, f.sizes)) if not min_size <= z <= max_size or head(recs, st) != (z, magic)]
        for tidx, qid, count in zip(f.topic_idx, f.queue_id, f.count):
            st = self._queue_status(tidx, qid, topics)
            if st == P.SUCCESS and bad and any(at <= i < at + count for i in bad):
                st = P.MESSAGE_ILLEGAL
            f.status.append(st)
            if st == P.SUCCESS:
                f.keys.append((tidx << QID_BITS) | qid)
                f.accepted += 1
            else:
                f.keys.append(-1)
            at += count
        return f

    @staticmethod
    def _refuse_few(few: list["_Few"], admitted: list[bool], status: int) -> None:
        """Steps 2 and 3's refusals: accepted requests not ``admitted`` (in pass order; all when
        the list is empty) get ``status``."""
        verdict = iter(admitted)
        for f in few:
            for i, st in enumerate(f.status):
                if st == P.SUCCESS and not next(verdict, False):
                    f.status[i] = status

    def _place_few(self, f: "_Few", ts: int):
        """Steps 4 and 5 for one slab: each accepted request's records placed and stamped, copied
        into the CommitLog in as few runs as are contiguous on both sides; its reply."""
        results, phys_out, at = [], [], 0
        copies: list[Any] = []
        recs, next_qoff, slot_of, shapes = f.recs, self.next_qoff, self.slot_of, message.RECORD_SHAPES
        for rid, qid, sys_flag, count, st, key in zip(f.req_id, f.queue_id, f.sys_flag, f.count, f.status, f.keys):
            starts, sizes = f.starts[at:at + count], f.sizes[at:at + count]
            at += count
            if st != P.SUCCESS:
                results.append((rid, st, qid, 0, 0, 0, 0, count, 0))              # a P.RESULT row
                phys_out += [-1] * count
                continue
            slot = slot_of.get(key)
            if slot is None:
                slot = self._slot(key)
            queued = _QUEUED[sys_flag & message.TX_MASK]
            qoff0 = next_qoff.item(slot) if queued else 0
            if queued:
                next_qoff[slot] = qoff0 + count
            phys = self._place_run(starts, sizes, copies)
            ts_at = shapes[(sys_flag >> 4) & 3][0]          # message.store_ts_at, without a call
            for k, start in enumerate(starts):
                _QQ.pack_into(recs, start + message.QUEUE_OFFSET_AT, qoff0 + k if queued else 0, phys[k])
                _Q.pack_into(recs, start + ts_at, ts)
            phys_out += phys
            results.append((rid, st, qid, qoff0, phys[0], phys[-1] + sizes[-1], ts, count, 0))
        for start, pos, size in copies:
            self.commitlog.write(pos, recs[start:start + size])
        return P.PUT_RESULT, P.result_bytes(results, phys_out)

    def _place_run(self, starts: list, sizes: list, copies: list) -> list:
        """Physical offsets of one request's records (contiguous in the slab), and their copy
        added to ``copies`` ([start in the slab, physical offset, length]): one copy when they
        all fit in the current file, joined to the last copy when both sides are adjacent (a
        slab's successive requests, so a run of single sends is one copy), else record by record
        (the file rolls among them)."""
        pos, st0 = self.write_pos, starts[0]
        run = sizes[0] if len(sizes) == 1 else sum(sizes)
        if pos % self.file_size + run + message.END_FILE_MIN_BLANK <= self.file_size:
            self.write_pos = pos + run
            last = copies[-1] if copies else None
            if last is not None and last[0] + last[2] == st0 and last[1] + last[2] == pos:
                last[2] += run
            else:
                copies.append([st0, pos, run])
            return [pos] if len(starts) == 1 else [pos + st - st0 for st in starts]
        phys = []
        for st, size in zip(starts, sizes):
            pos, fsize = self.write_pos, self.file_size
            file_end = (pos // fsize + 1) * fsize
            if pos + size + message.END_FILE_MIN_BLANK > file_end:
                pos = self._blank_to(pos, file_end)
            self.write_pos = pos + size
            phys.append(pos)
            copies.append([st, pos, size])
        return phys

    # ------------------------------------------------------------ the vector path
    def _put_many(self, slabs: list, ts: int) -> list:
        """The steps over every record of the pass at once, with numpy."""
        requests = np.concatenate([r for _, r, _, _ in slabs])
        sizes = np.concatenate([z for _, _, z, _ in slabs]).astype(np.int64)
        recs = slabs[0][3] if len(slabs) == 1 else np.concatenate([b for _, _, _, b in slabs])
        counts = requests["count"].astype(np.int64)
        starts = np.zeros(len(sizes), dtype=np.int64)
        np.cumsum(sizes[:-1], out=starts[1:])
        qid = requests["queue_id"]
        keys = (requests["topic_idx"].astype(np.int64) << QID_BITS) | np.where((qid >= 0) & (qid < QID_MASK), qid, QID_MASK)
        status = self._check_many(requests, keys, counts, sizes, starts, recs)
        ok = np.flatnonzero(status == P.SUCCESS)
        if len(ok) > self._queue_room():
            status[ok[~np.array(self._admit(keys[ok].tolist()), bool)]] = P.QUEUES_FULL
        accepted = status == P.SUCCESS
        if accepted.any() and not self._ensure_files(int(sizes.sum())):
            status[accepted] = P.SERVICE_NOT_AVAILABLE
            accepted[:] = False
        phys = np.full(len(sizes), -1, dtype=np.int64)
        qoff = np.zeros(len(requests), dtype=np.int64)
        if accepted.any():
            qoff = self._queue_offsets(requests, keys, counts, accepted)
            idx = np.flatnonzero(np.repeat(accepted, counts))
            phys[idx] = self._place_many(recs, starts[idx], sizes[idx], np.repeat(qoff, counts)[idx] + self._rank(counts)[idx],
                                         np.repeat(requests["sys_flag"], counts)[idx], ts)
        out, q0, r0 = [], 0, 0
        for j, req_j, sizes_j, _ in slabs:
            q1, r1 = q0 + len(req_j), r0 + len(sizes_j)
            out.append((j, self._reply_many(req_j, status[q0:q1], phys[r0:r1], qoff[q0:q1], sizes_j, ts)))
            q0, r0 = q1, r1
        return out

    def _check_many(self, requests, keys, counts, sizes, starts, recs) -> np.ndarray:
        """Step 1 for every request of the pass: ``_queue_status`` once per distinct queue, then
        the records' sizes within bounds and equal to their own TOTALSIZE, and their MAGIC."""
        topics: dict = {}
        uniq, inverse = np.unique(keys, return_inverse=True)
        status = np.array([self._queue_status(k >> QID_BITS, k & QID_MASK if k & QID_MASK != QID_MASK else -1, topics)
                           for k in uniq.tolist()], dtype=np.int32)[inverse]    # (QID_MASK: no such queue id)
        bad = (sizes < message.MIN_RECORD_SIZE) | (sizes > self.cfg.max_record_size)
        sane = np.flatnonzero(~bad)              # only these are long enough to read a header from
        head = recs[starts[sane, None] + _BYTE].view(">i4").reshape(-1, 2)
        bad[sane] = (head[:, 0] != sizes[sane]) | (head[:, 1] != message.MAGIC)
        bad_request = np.add.reduceat(bad.astype(np.int64), np.cumsum(counts) - counts) > 0
        status[(status == P.SUCCESS) & bad_request] = P.MESSAGE_ILLEGAL
        return status

    def _slots(self, keys: np.ndarray) -> np.ndarray:
        """The queue slot of each queue key, taking slots for queues written for the first time."""
        self._merge_new()
        if len(self.slot_keys):
            pos = np.minimum(np.searchsorted(self.slot_keys, keys), len(self.slot_keys) - 1)
            if (self.slot_keys[pos] == keys).all():
                return self.slot_of_key[pos]
        for key in np.unique(keys).tolist():
            self._slot(key)
        return self._slots(keys)

    @staticmethod
    def _rank(counts: np.ndarray) -> np.ndarray:
        """Position of each record inside its request."""
        first = np.repeat(np.cumsum(counts) - counts, counts)
        return np.arange(int(counts.sum()), dtype=np.int64) - first

    def _queue_offsets(self, requests, keys, counts, accepted) -> np.ndarray:
        """First queue offset of every accepted request (dense per queue, in pass order);
        prepared and rolled-back records take none."""
        okq = np.flatnonzero(accepted)
        slots = self._slots(keys[okq])
        tx = requests["sys_flag"][okq] & message.TX_MASK
        eff = np.where((tx == message.TX_PREPARED) | (tx == message.TX_ROLLBACK), 0, counts[okq])
        order = np.argsort(slots, kind="stable")
        s_sorted, e_sorted = slots[order], eff[order]
        before = np.cumsum(e_sorted) - e_sorted
        group_start = np.ones(len(s_sorted), bool)
        group_start[1:] = s_sorted[1:] != s_sorted[:-1]
        first_idx = np.maximum.accumulate(np.where(group_start, np.arange(len(s_sorted)), 0))
        base_sorted = self.next_qoff[s_sorted] + before - before[first_idx]
        out = np.zeros(len(requests), dtype=np.int64)
        base = np.empty(len(okq), dtype=np.int64)
        base[order] = base_sorted
        out[okq] = np.where(eff > 0, base, 0)
        np.add.at(self.next_qoff, slots, eff)
        return out

    def _place_many(self, recs, src, sizes, qoff, sys_flags, ts: int) -> np.ndarray:
        """Step 4 for the accepted records: physical offsets (rolling to a new file, BLANK-padded,
        when one is full), the queue offset, physical offset and store timestamp patched into the
        records in the ring, and the records written into the CommitLog, one ``pwrite`` per run
        contiguous in both ring and file."""
        n = len(sizes)
        phys = np.empty(n, dtype=np.int64)
        pos, i = self.write_pos, 0
        while i < n:
            file_end = (pos // self.file_size + 1) * self.file_size
            ends = pos + np.cumsum(sizes[i:])
            k = int(np.searchsorted(ends + message.END_FILE_MIN_BLANK, file_end, side="right"))
            phys[i:i + k] = ends[:k] - sizes[i:i + k]
            if k:
                pos = int(ends[k - 1])
            i += k
            if i < n:
                pos = self._blank_to(pos, file_end)
        self.write_pos = pos
        qoff = np.where(np.isin(sys_flags & message.TX_MASK, (message.TX_PREPARED, message.TX_ROLLBACK)), 0, qoff)
        recs[src[:, None] + (message.QUEUE_OFFSET_AT + _BYTE)] = _be64(qoff)
        recs[src[:, None] + (message.PHYS_OFFSET_AT + _BYTE)] = _be64(phys)
        ts_at = np.where(sys_flags & message.BORNHOST_V6, message.STORE_TS_AT + message.HOST_V6_EXTRA, message.STORE_TS_AT)
        recs[(src + ts_at)[:, None] + _BYTE] = _be64(np.full(n, ts))
        brk = np.ones(n, bool)
        brk[1:] = (src[1:] != src[:-1] + sizes[:-1]) | (phys[1:] != phys[:-1] + sizes[:-1])
        runs = np.flatnonzero(brk)
        for a, b in zip(runs.tolist(), np.append(runs[1:], n).tolist()):
            p0, s0 = int(phys[a]), int(src[a])
            self.commitlog.write(p0, recs[s0:s0 + int(phys[b - 1] + sizes[b - 1]) - p0])
        return phys

    @staticmethod
    def _reply_many(requests, status, phys, qoff, sizes, ts: int):
        """Step 5 for one slab: its requests' results, then every record's physical offset."""
        nq = len(requests)
        res = np.zeros(nq, P.RESULT)
        res["req_id"], res["status"], res["queue_id"] = requests["req_id"], status, requests["queue_id"]
        counts = requests["count"].astype(np.int64)
        res["count"] = counts
        okq = np.flatnonzero(status == P.SUCCESS)
        first = np.cumsum(counts) - counts
        last = first[okq] + counts[okq] - 1
        res["queue_offset"][okq] = qoff[okq]
        res["phys_offset"][okq] = phys[first[okq]]
        res["end_offset"][okq] = phys[last] + sizes[last]
        res["store_ts"][okq] = ts
        head = np.zeros(1, P.RESULT_HEAD)
        head[0] = (nq, len(phys))
        return P.PUT_RESULT, [head, res, phys]


class _Few:
    """One slab on the scalar path: its requests' columns, its records' starts and sizes, and
    what step 1 found for each request (status, and queue key when it may append)."""
    __slots__ = ("j", "req_id", "topic_idx", "queue_id", "sys_flag", "count", "starts", "sizes", "recs", "status", "keys",
                 "accepted")

    def __init__(self, j: int, requests: np.ndarray, sizes: np.ndarray, recs: np.ndarray):
        self.j, self.recs = j, recs.data               # struct and slicing on it skip numpy's overhead
        rows = requests.tolist()                         # one call: a view of each field would cost more
        fields: Any = zip(*rows) if rows else ((),) * 7
        (self.req_id, self.topic_idx, self.queue_id, self.sys_flag, self.count, _flags, _pad) = fields
        self.sizes = sizes.tolist()
        self.starts = list(itertools.accumulate(self.sizes, initial=0))
        self.status: list[int] = []
        self.keys: list[int] = []      # each request's queue key, -1 when it may not append
        self.accepted = 0              # requests step 1 let through


assert P.REQUEST.names == ("req_id", "topic_idx", "queue_id", "sys_flag", "count", "flags", "pad"), "_Few's columns"
