"""The writer: the only process that appends to the CommitLog.

One pass (``step``) drains every non-empty request ring (up to ``writerBatchBytes`` each) and
appends all the PUT slabs it took as one batch, with a handful of numpy operations over all their
requests and records: validates (topic, queue id, record sizes and magic), finds each request's
queue slot, assigns queue offsets (dense per queue), physical offsets (rolling files, BLANK-padding
the tail of a full file), the store timestamp, patches those fields into the records, and writes
them into the CommitLog files (``pwrite``, not through a mapping: no page fault per 4 KiB page) in
as few runs as possible.  Then the commit point, in this order:

    1. journal_written = -1; each drained slot's journal_read_pos = its new ring position
    2. journal_written = new end;  3. written = new end      <- commit: the batch now exists
    4. responses into the response rings, request rings released, wakers posted

A writer killed before 3 leaves its rings unreleased: the next writer redoes the batch over the
same bytes.  Killed after 3, the journal tells the next writer where each ring had got to, so no
request is appended twice.  Responses lost that way surface to producers as a writer-epoch change.

A TOPIC entry is answered later than its pass: the pass hands the change to topics.json's thread,
and the pass after that thread has written the file publishes the topic and answers it.
"""
from __future__ import annotations

import itertools
import json
import logging
import os
import struct
import sys
import time

import numpy as np

from shm.layout import C, S, T
from shm.ring import RingCorrupt
from shm.tables import TableFull, append_queue, queue_nums_of
from store import message
from store.errors import Condition, DiskFull
from store.mappedfile import MappedFileQueue
from writer import protocol as P
from writer.groups import ConsumerOffsets, SubscriptionGroups
from writer.topics import TopicTable

log = logging.getLogger("rocketbox.writer")
SWITCH_INTERVAL_S = 0.001    # the GIL's hand-over while consumerOffset.json is written by its thread (the loop
                             # waits at most this, or the longest C call: ~3.6 ms at 65,536 offsets, 5 ms+ else)
_TS_PATCH = np.arange(8)
_Q, _QQ = struct.Struct(">q"), struct.Struct(">qq")   # QQ: queue then phys offset
assert message.PHYS_OFFSET_AT == message.QUEUE_OFFSET_AT + 8
COMMITLOG_RESERVE_AHEAD = 1 << 20   # CommitLog blocks reserved beyond a slab's reach: one fallocate a MiB
FEW_REQUESTS = 48            # passes of at most this many requests take _put_few: the crossover, fitted from
                             # bench.paths (scalar ~153k a pass + ~28k a request; vector ~1.3M + ~4k a record)


def _be64(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=">i8").view(np.uint8).reshape(-1, 8)


class WriterService:
    def __init__(self, cfg, shared):
        self.cfg, self.sh = cfg, shared
        self.ctl = shared.control
        self.no_room = Condition(log, "refusing appends (SERVICE_NOT_AVAILABLE): no room for the next CommitLog file")
        self.commitlog: MappedFileQueue | None = None
        self.file_size = cfg.mappedFileSizeCommitLog
        self.reserved_to = 0          # CommitLog blocks are reserved up to here (``_ensure_files``)
        self.stop_requested = False

    # ------------------------------------------------------------ lifecycle
    def open(self) -> "WriterService":
        sh, ctl = self.sh, self.ctl
        if not ctl[C.RECOVERED]:
            raise RuntimeError("store not recovered yet: the supervisor runs recovery before the writer starts")
        self.commitlog = MappedFileQueue(self.cfg.commitlog_dir, self.file_size, True).load()
        self.topics = TopicTable(self.cfg, sh.views, ctl, sh.writer_waker)
        self.topics.attach()
        self.topic_replies: list[tuple[int, tuple]] = []    # (ring, reply) of topics written, not yet pushed
        self.offsets = ConsumerOffsets(self.cfg, sh.views, ctl)
        self.offsets.attach()
        self.groups = SubscriptionGroups(self.cfg)
        self.write_pos = int(ctl[C.WRITTEN])
        if ctl[C.JOURNAL_WRITTEN] == ctl[C.WRITTEN]:       # killed after a commit, before releasing
            for i, ring in enumerate(sh.request_rings):
                if sh.slots[i, S.JOURNAL_READ_POS] > ring.read_pos:
                    ring.release(int(sh.slots[i, S.JOURNAL_READ_POS]))
        self.next_qoff = np.zeros(len(sh.views["queue_max"]), dtype=np.int64)
        self._wait_dispatched()
        n = sh.queue_count()
        self.next_qoff[:n] = sh.views["queue_max"][:n]
        self._rebuild_slot_keys()
        for i, ring in enumerate(sh.request_rings):    # what earlier writers took: theirs to have answered
            sh.slots[i, S.EPOCH_READ_POS] = ring.read_pos
        ctl[C.WRITER_EPOCH] += 1
        ctl[C.PID_WRITER] = os.getpid()
        return self

    def _wait_dispatched(self) -> None:
        """Queue offsets are the dispatcher's max offsets once it has caught up with 'written'."""
        while self.ctl[C.DISPATCHED] < self.ctl[C.WRITTEN] and not self.stop_requested:
            self.sh.dispatcher_waker.post()
            time.sleep(0.01)

    def _rebuild_slot_keys(self) -> None:
        n = self.sh.queue_count()
        names, ids = self.sh.views["queue_names"][:n], self.sh.views["queue_ids"][:n]
        tidx = np.array([self.topics.index.get(nm.decode(), -1) for nm in names], dtype=np.int64)
        keys = (tidx << 20) | ids.astype(np.int64)
        order = np.argsort(keys)
        self.slot_keys, self.slot_of_key = keys[order], order.astype(np.int64)
        self.slot_of = dict(zip(self.slot_keys.tolist(), self.slot_of_key.tolist()))   # the same, for _put_few

    def close(self) -> None:
        if self.commitlog is not None:
            self.topics.close()            # topics.json gets every change taken: publish and answer them
            self._topics_written()
            self.groups.close()
            self.offsets.close()
            self.ctl[C.PID_WRITER] = 0
            self.commitlog.close()
            self.commitlog = None

    # ------------------------------------------------------------ one pass
    def step(self) -> bool:
        sh = self.sh
        drained, taken = [], []          # (slot, end position); (slot, kind, payload) in ring order
        ts = int(time.time() * 1000)
        settled = self._topics_written()
        for i, ring in enumerate(sh.request_rings):
            if ring.write_pos == ring.read_pos:
                continue
            room = sh.response_rings[i].capacity - sh.response_rings[i].used()
            try:
                entries = ring.entries(self.cfg.writerBatchBytes)
            except RingCorrupt as e:
                log.error("request ring %d is corrupt (%s): its unread entries are dropped", i, e)
                ring.skip_all()
                continue
            end = ring.read_pos
            for kind, payload, after in entries:
                need = self._response_size(kind, payload)
                if need > sh.response_rings[i].capacity:
                    log.error("slab on ring %d needs a %d-byte reply, more than the response ring holds: dropped", i, need)
                    end = after
                    continue
                if need > room:
                    break                # the owner is slow to read replies: leave the rest for later
                room -= need
                taken.append((i, kind, payload))
                end = after
            if end != ring.read_pos:
                drained.append((i, end))
        if not drained:
            return settled
        self._commit(drained, taken, self._handle(taken, ts), ts)
        return True

    def _response_size(self, kind: int, payload: np.ndarray) -> int:
        if kind == P.PUT and len(payload) >= P.SLAB_HEAD.itemsize:
            n_requests, n_records, _bytes = P.SLAB_HEAD_S.unpack_from(payload, 0)
            n = P.RESULT_HEAD.itemsize + n_requests * P.RESULT.itemsize + n_records * 8
        elif kind in (P.OFFSET, P.GROUP):
            return 0
        else:
            n = P.TOPIC_RES.itemsize
        return 2 * ((n + 8 + 7) & ~7)    # entry header and padding, twice for a possible wrap

    def _handle(self, taken, ts: int) -> list:
        """The reply to each taken entry.  Runs of PUT slabs (from any rings) are appended as one
        batch; a TOPIC request first lets the PUTs before it land, so ring order is kept."""
        replies, run = [], []
        for i, kind, payload in taken + [(None, None, None)]:
            if kind == P.PUT:
                run.append(payload)
                continue
            if run:
                replies += self._put(run, ts)
                run = []
            if kind == P.TOPIC:
                replies.append(self._topic(i, payload))
            elif kind in (P.OFFSET, P.GROUP):
                replies.append(self._group_state(kind, payload))
            elif kind is not None:
                log.error("request ring entry of unknown kind %d (%d bytes) dropped", kind, len(payload))
                replies.append(None)
        return replies

    def _commit(self, drained, taken, replies, ts: int) -> None:
        sh, ctl = self.sh, self.ctl
        ctl[C.JOURNAL_WRITTEN] = -1
        for i, end in drained:
            sh.slots[i, S.JOURNAL_READ_POS] = end
        ctl[C.JOURNAL_WRITTEN] = self.write_pos
        ctl[C.WRITTEN_TS] = ts
        ctl[C.WRITTEN] = self.write_pos                  # the commit point
        if self.cfg.sync_flush:                          # SYNC_FLUSH replies wait for it: first
            sh.flusher_waker.post()
        for (i, _kind, _payload), reply in zip(taken, replies):
            if reply is not None and not sh.response_rings[i].try_push(reply[0], reply[1]):
                log.error("response ring %d full despite the room check; a reply was dropped", i)
        for i, end in drained:
            sh.request_rings[i].release(end)
            sh.slot_wakers[i].post()
        sh.dispatcher_waker.post()                       # last: no reply waits for it

    # ------------------------------------------------------------ topics
    def _topic(self, ring: int, payload: np.ndarray):
        """A TOPIC entry: refused now, or handed to topics.json's thread and answered by
        ``_topics_written`` once the file has it (the loop goes on meanwhile)."""
        req_id = int(payload[:8].view("<u8")[0])
        try:
            tc = json.loads(bytes(payload[P.TOPIC_REQ.itemsize:]).decode())
            message.check_topic(tc["topicName"])
            self.topics.request(tc, (ring, req_id))
            return None
        except Exception as e:          # a bad request from a producer: answer it, keep going
            log.warning("create topic refused: %s", e)
            return self._topic_result(req_id, e)

    @staticmethod
    def _topic_result(req_id: int, error: Exception | None, idx: int = -1):
        res = np.zeros(1, P.TOPIC_RES)
        status = P.SUCCESS if error is None else P.TOPICS_FULL if isinstance(error, TableFull) else P.SYSTEM_ERROR
        res[0] = (req_id, status, idx if error is None else -1)
        return P.TOPIC_RESULT, [res]

    def _topics_written(self) -> bool:
        """Publish the topics topics.json now has and answer their requests (a reply the response
        ring has no room for waits for the next pass); whether there was any."""
        for (ring, req_id), idx, error in self.topics.settle():
            self.topic_replies.append((ring, self._topic_result(req_id, error, idx)))
        if not self.topic_replies:
            return False
        waiting, posted = [], set()
        for ring, reply in self.topic_replies:
            if self.sh.response_rings[ring].try_push(*reply):
                posted.add(ring)
            else:
                waiting.append((ring, reply))
        self.topic_replies = waiting
        for ring in posted:
            self.sh.slot_wakers[ring].post()
        return bool(posted)

    def _group_state(self, kind: int, payload: np.ndarray) -> None:
        try:
            if kind == P.OFFSET:
                self.offsets.apply(payload[:len(payload) - len(payload) % P.OFFSET_UPDATE.itemsize].view(P.OFFSET_UPDATE))
            else:
                self.groups.upsert(bytes(payload))
        except Exception as e:          # a bad update from a reader: log it, keep going
            log.warning("consumer group update refused: %s", e)

    # ------------------------------------------------------------ puts
    def _put(self, payloads: list, ts: int) -> list:
        """Append the records of several PUT slabs as one batch; -> the reply to each slab."""
        parsed, replies = [], [None] * len(payloads)
        for j, payload in enumerate(payloads):
            try:
                parsed.append((j, *P.parse_slab(payload)[:3]))
            except ValueError as e:
                log.error("malformed slab dropped: %s", e)
        if sum([len(r) for _, r, _, _ in parsed]) <= FEW_REQUESTS:
            for j, reply in self._put_few(parsed, ts):
                replies[j] = reply
            return replies
        slabs = []
        for j, requests, sizes, recs in parsed:
            counts = requests["count"].astype(np.int64)
            if counts.sum() != len(sizes) or (counts <= 0).any() or int(sizes.astype(np.int64).sum()) != len(recs):
                log.error("slab whose request counts and record sizes disagree: refused whole")
                replies[j] = self._reply(requests, np.full(len(requests), P.SYSTEM_ERROR, np.int32),
                                         np.full(len(sizes), -1, np.int64))
            else:
                slabs.append((j, requests, sizes, recs))
        if not slabs:
            return replies
        requests = np.concatenate([r for _, r, _, _ in slabs])
        sizes = np.concatenate([z for _, _, z, _ in slabs]).astype(np.int64)
        recs = slabs[0][3] if len(slabs) == 1 else np.concatenate([b for _, _, _, b in slabs])
        counts = requests["count"].astype(np.int64)
        rec_start = np.zeros(len(sizes), dtype=np.int64)
        np.cumsum(sizes[:-1], out=rec_start[1:])
        status = self._validate(requests, counts, sizes, rec_start, recs)
        ok, room = np.flatnonzero(status == P.SUCCESS), self._queue_room()
        if room < len(ok):                       # (else even one new queue per request fits)
            keys = (requests["topic_idx"][ok].astype(np.int64) << 20) | requests["queue_id"][ok]
            new = [k for k in np.unique(keys).tolist() if k not in self.slot_of]
            status[ok[np.isin(keys, new[room:])]] = P.QUEUES_FULL
        ok_req = status == P.SUCCESS
        if ok_req.any() and not self._ensure_files(int(sizes.sum())):
            status[ok_req] = P.SERVICE_NOT_AVAILABLE
            ok_req[:] = False
        phys_all = np.full(len(sizes), -1, dtype=np.int64)
        qoff = np.zeros(len(requests), dtype=np.int64)
        if ok_req.any():
            qoff = self._queue_offsets(requests, counts, ok_req)
            idx = np.flatnonzero(np.repeat(ok_req, counts))
            src, size = rec_start[idx], sizes[idx]
            phys = self._place(size)
            tx = np.repeat(requests["sys_flag"], counts)[idx]
            self._patch(recs, src, np.repeat(qoff, counts)[idx] + self._rank(counts)[idx], phys, ts, tx)
            self._copy(recs, src, size, phys)
            phys_all[idx] = phys
        q0 = r0 = 0
        for j, req_j, sizes_j, _ in slabs:
            q1, r1 = q0 + len(req_j), r0 + len(sizes_j)
            replies[j] = self._reply(req_j, status[q0:q1], phys_all[r0:r1], (qoff[q0:q1], sizes_j, ts))
            q0, r0 = q1, r1
        return replies

    def _put_few(self, slabs: list, ts: int) -> list:
        """``_put`` for a pass of a few requests (the usual pass at low load), request by request:
        the vector path's fixed cost (~100 numpy calls, ~0.5 ms here) would be most of the pass.
        Same checks, offsets, bytes and replies as the vector path; the writer tests run both."""
        meta, min_size, max_size = self.sh.views["topic_meta"], message.MIN_RECORD_SIZE, self.cfg.max_record_size
        head, magic = message.HEAD.unpack_from, message.MAGIC
        stopping, n_topics = bool(self.ctl[C.STOPPING]), self.sh.topic_count()
        plan = []               # per slab: (j, request rows, records, [[status, tidx, qid, count, sys_flag, starts,
                                #                                         sizes, slot]])
        total, topics = 0, {}   # topics: index -> (live, queue count), read once per pass
        appends = False         # any request to append
        room, new, slot_of = -1, set(), self.slot_of   # queue slots this pass may take, read at its first new queue
        slot = None             # a request's queue slot, kept in its row (None: a queue new this pass)
        out = []
        for j, requests, sizes, recs in slabs:
            recs = memoryview(recs)                  # struct and slicing on it skip numpy's overhead
            req_l, size_l, at, rows = requests.tolist(), sizes.tolist(), 0, []
            counts = [r[4] for r in req_l]
            if sum(counts) != len(size_l) or min(counts, default=1) <= 0 or sum(size_l) != len(recs):
                log.error("slab whose request counts and record sizes disagree: refused whole")
                out.append((j, (P.PUT_RESULT, P.result_bytes([(r[0], P.SYSTEM_ERROR, r[2], 0, 0, 0, 0, 0, 0)
                                                               for r in req_l], [-1] * len(size_l)))))
                continue
            rec_start = list(itertools.accumulate(size_l, initial=0))
            total += rec_start[-1]
            # records whose size is out of bounds or disagrees with their own TOTALSIZE and MAGIC
            bad = [i for i, (st, z) in enumerate(zip(rec_start, size_l))
                   if not min_size <= z <= max_size or head(recs, st) != (z, magic)]
            for (_rid, tidx, qid, sys_flag, count, _fl, _pad) in req_l:
                topic = topics.get(tidx)
                if topic is None and 0 <= tidx < n_topics:
                    row = meta[tidx].tolist()
                    topic = topics[tidx] = (row[T.LIVE] == 1, queue_nums_of(row))
                if stopping:
                    status = P.SERVICE_NOT_AVAILABLE
                elif topic is None or not topic[0]:
                    status = P.TOPIC_NOT_EXIST
                elif not 0 <= qid < topic[1]:
                    status = P.SYSTEM_ERROR
                elif bad and any(at <= i < at + count for i in bad):
                    status = P.MESSAGE_ILLEGAL
                elif (slot := slot_of.get(key := (tidx << 20) | qid)) is not None or key in new:
                    status, appends = P.SUCCESS, True
                else:                                           # a queue's first write
                    if room < 0:
                        room = self._queue_room()
                    if len(new) < room:
                        status, appends = P.SUCCESS, True
                        new.add(key)
                    else:
                        status = P.QUEUES_FULL
                rows.append([status, tidx, qid, count, sys_flag, rec_start[at:at + count], size_l[at:at + count], slot])
                at += count
            plan.append((j, req_l, recs, rows))
        if appends and not self._ensure_files(total):
            for *_, rows in plan:
                for r in rows:
                    if r[0] == P.SUCCESS:
                        r[0] = P.SERVICE_NOT_AVAILABLE
        next_qoff = self.next_qoff
        for j, req_l, recs, rows in plan:
            results, phys_out, copies = [], [], []
            for req, (status, tidx, qid, count, sys_flag, starts, rsizes, slot) in zip(req_l, rows):
                req_id = req[0]
                if status != P.SUCCESS:
                    results.append((req_id, status, qid, 0, 0, 0, 0, count, 0))
                    phys_out += [-1] * count
                    continue
                if slot is None:                     # a queue new this pass: made by its first request
                    key = (tidx << 20) | qid
                    slot = slot_of.get(key)
                    if slot is None:
                        slot = self._new_slot(key, tidx, qid)
                tx = sys_flag & message.TX_MASK
                queued = tx != message.TX_PREPARED and tx != message.TX_ROLLBACK
                qoff0 = next_qoff.item(slot) if queued else 0
                if queued:
                    next_qoff[slot] = qoff0 + count
                phys = self._append_few(recs, starts, rsizes, qoff0 if queued else None,
                                        message.RECORD_SHAPES[(sys_flag >> 4) & 3][0], ts, copies)
                phys_out += phys
                results.append((req_id, status, qid, qoff0, phys[0], phys[-1] + rsizes[-1], ts, count, 0))
            for st, p, z in copies:
                self.commitlog.write(p, recs[st:st + z])
            out.append((j, (P.PUT_RESULT, P.result_bytes(results, phys_out))))
        return out

    def _append_few(self, recs, starts: list, sizes: list, qoff0, ts_at: int, ts: int, copies: list) -> list:
        """One request's records (contiguous in ``recs``) stamped, and their copy into the CommitLog
        added to ``copies`` ([start in recs, physical offset, length]): one copy when they all fit
        in the current file, joined to the last copy when both sides are adjacent (a slab's
        successive requests, so a run of single sends is one copy), else record by record (the
        file rolls among them).  ``qoff0``: the first queue offset, None for records that take
        none.  -> each record's physical offset."""
        pos, st0 = self.write_pos, starts[0]
        run = sizes[0] if len(sizes) == 1 else sum(sizes)
        if pos % self.file_size + run + message.END_FILE_MIN_BLANK <= self.file_size:
            phys = [pos] if len(starts) == 1 else [pos + st - st0 for st in starts]
            self.write_pos = pos + run
            last = copies[-1] if copies else None
            if last is not None and last[0] + last[2] == st0 and last[1] + last[2] == pos:
                last[2] += run
            else:
                copies.append([st0, pos, run])
        else:
            phys = [self._place_one(z) for z in sizes]
            copies += ([st, p, z] for st, p, z in zip(starts, phys, sizes))
        for k, st in enumerate(starts):
            _QQ.pack_into(recs, st + message.QUEUE_OFFSET_AT, 0 if qoff0 is None else qoff0 + k, phys[k])
            _Q.pack_into(recs, st + ts_at, ts)
        return phys

    def _place_one(self, size: int) -> int:
        """``_place`` for one record."""
        pos, fsize = self.write_pos, self.file_size
        file_end = (pos // fsize + 1) * fsize
        if pos + size + message.END_FILE_MIN_BLANK > file_end:
            pos = self._blank_to(pos, file_end)
        self.write_pos = pos + size
        return pos

    @staticmethod
    def _reply(requests, status, phys, placed=None):
        """PUT_RESULT of one slab: its requests' results, then every record's physical offset.
        ``placed`` = (queue offsets, record sizes, store timestamp) when the slab was consistent;
        then each result carries its request's record count, so the client can split ``phys``."""
        nq = len(requests)
        res = np.zeros(nq, P.RESULT)
        res["req_id"], res["status"], res["queue_id"] = requests["req_id"], status, requests["queue_id"]
        if placed is not None:
            qoff, sizes, ts = placed
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

    def _ensure_files(self, nbytes: int) -> bool:
        """Create every CommitLog file the next ``nbytes`` may reach (plus one roll), with blocks
        reserved behind them, before any byte is placed; False when the disk cannot hold them
        (the slab is refused, not torn)."""
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

    @staticmethod
    def _rank(counts: np.ndarray) -> np.ndarray:
        """Position of each record inside its request."""
        total = int(counts.sum())
        first = np.repeat(np.cumsum(counts) - counts, counts)
        return np.arange(total, dtype=np.int64) - first

    def _validate(self, requests, counts, sizes, start, recs) -> np.ndarray:
        nq = len(requests)
        status = np.zeros(nq, dtype=np.int32)
        if self.ctl[C.STOPPING]:
            status[:] = P.SERVICE_NOT_AVAILABLE
            return status
        if nq == 0:
            return status
        n_topics = self.sh.topic_count()
        meta = self.sh.views["topic_meta"]
        tidx = requests["topic_idx"]
        known = (tidx >= 0) & (tidx < n_topics)
        safe = np.where(known, tidx, 0)
        known &= meta[safe, T.LIVE] == 1
        status[~known] = P.TOPIC_NOT_EXIST
        qnums = np.maximum(meta[safe, T.READ_QUEUE_NUMS], meta[safe, T.WRITE_QUEUE_NUMS])
        qid = requests["queue_id"]
        status[(status == 0) & ((qid < 0) | (qid >= qnums))] = P.SYSTEM_ERROR
        # every record: size within limits, and its own TOTALSIZE and MAGIC fields agree
        sz = sizes.astype(np.int64)
        bad = (sz < message.MIN_RECORD_SIZE) | (sz > self.cfg.max_record_size)
        sane = np.flatnonzero(~bad)              # only these are long enough to read a header from
        head = recs[start[sane, None] + np.arange(8)].view(">i4").reshape(-1, 2)
        bad[sane] = (head[:, 0] != sz[sane]) | (head[:, 1] != message.MAGIC)
        bad_per_req = np.add.reduceat(bad.astype(np.int64), np.cumsum(counts) - counts) > 0
        status[(status == 0) & bad_per_req] = P.MESSAGE_ILLEGAL
        return status

    def _slots(self, keys: np.ndarray, tidx: np.ndarray, qid: np.ndarray) -> np.ndarray:
        pos = np.searchsorted(self.slot_keys, keys)
        pos_c = np.minimum(pos, max(len(self.slot_keys) - 1, 0))
        found = (pos < len(self.slot_keys)) & (self.slot_keys[pos_c] == keys) if len(self.slot_keys) else np.zeros(len(keys), bool)
        if not found.all():
            for j in np.unique(np.flatnonzero(~found)):
                if not (self.slot_keys == keys[j]).any():
                    self._new_slot(int(keys[j]), int(tidx[j]), int(qid[j]))
            return self._slots(keys, tidx, qid)
        return self.slot_of_key[pos_c]

    def _queue_room(self) -> int:
        """Queue slots still free.  A pass takes at most this many new queues; a request for one
        more is answered QUEUES_FULL (the writer never stops in the middle of a pass on it)."""
        return len(self.sh.views["queue_ids"]) - int(self.ctl[C.QUEUE_COUNT])

    def _new_slot(self, key: int, tidx: int, qid: int) -> None:
        s = append_queue(self.sh.views, self.ctl, self.sh.views["topic_names"][tidx], qid)
        self.next_qoff[s] = 0
        i = np.searchsorted(self.slot_keys, key)
        self.slot_keys = np.insert(self.slot_keys, i, key)
        self.slot_of_key = np.insert(self.slot_of_key, i, s)
        self.slot_of[key] = s
        return s

    def _queue_offsets(self, requests, counts, ok_req) -> np.ndarray:
        """First queue offset of every accepted request; prepared/rollback records take none."""
        tidx = requests["topic_idx"].astype(np.int64)
        qid = requests["queue_id"].astype(np.int64)
        okq = np.flatnonzero(ok_req)
        slots = self._slots((tidx[okq] << 20) | qid[okq], tidx[okq], qid[okq])
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

    def _place(self, sizes: np.ndarray) -> np.ndarray:
        """Physical offset of each record, rolling to a new file (BLANK-padded) when one is full."""
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
        return phys

    def _blank_to(self, pos: int, file_end: int) -> int:
        """The rest of a full file from ``pos`` is a BLANK filler; the next file starts at its end."""
        self.commitlog.write(pos, message.BLANK.pack(file_end - pos, message.BLANK_MAGIC))
        return file_end

    def _patch(self, recs, src, qoff, phys, ts: int, sys_flags) -> None:
        """Queue offset, physical offset and store timestamp, written into the records in the ring."""
        qoff = np.where(np.isin(sys_flags & message.TX_MASK, (message.TX_PREPARED, message.TX_ROLLBACK)), 0, qoff)
        recs[src[:, None] + (message.QUEUE_OFFSET_AT + _TS_PATCH)] = _be64(qoff)
        recs[src[:, None] + (message.PHYS_OFFSET_AT + _TS_PATCH)] = _be64(phys)
        ts_at = np.where(sys_flags & message.BORNHOST_V6, message.STORE_TS_AT + message.HOST_V6_EXTRA,
                         message.STORE_TS_AT)
        recs[(src + ts_at)[:, None] + _TS_PATCH] = _be64(np.full(len(src), ts))

    def _copy(self, recs, src, size, phys) -> None:
        """Write records into the CommitLog, one ``pwrite`` per run contiguous in both ring and file."""
        n = len(src)
        brk = np.ones(n, bool)
        brk[1:] = (src[1:] != src[:-1] + size[:-1]) | (phys[1:] != phys[:-1] + size[:-1])
        starts = np.flatnonzero(brk)
        ends = np.append(starts[1:], n)
        for a, b in zip(starts.tolist(), ends.tolist()):
            p0, s0 = int(phys[a]), int(src[a])
            length = int(phys[b - 1] + size[b - 1]) - p0
            self.commitlog.write(p0, recs[s0:s0 + length])

    # ------------------------------------------------------------ loop
    def run(self) -> None:
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        while not self.stop_requested:
            if not self.step():
                self.sh.writer_waker.wait(1.0)
            self.offsets.persist()
            self.groups.settle()
        while self.step():     # drain what producers already queued
            pass
