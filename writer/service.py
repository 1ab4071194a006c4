"""The writer: the only process that appends to the CommitLog.

One pass (``step``) drains every non-empty request ring (up to ``writerBatchBytes`` each) and
appends all the PUT slabs it took as one batch (``writer/append.py``: checks, queue and physical
offsets, the records stamped and written into the CommitLog with ``pwrite``, not through a
mapping, in as few runs as possible).  Then the commit point, in this order:

    1. journal_written = -1; each drained slot's journal_read_pos = its new ring position
    2. journal_written = new end;  3. written = new end      <- commit: the batch now exists
    4. responses into the response rings, request rings released, wakers posted

A writer killed before 3 leaves its rings unreleased: the next writer redoes the batch over the
same bytes.  Killed after 3, the journal tells the next writer where each ring had got to, so no
request is appended twice.  Responses lost that way surface to producers as a writer-epoch change.

A TOPIC entry is answered later than its pass: the pass hands the change to topics.json's thread,
and the pass after that thread has made it durable (``store/topicjournal.py``) publishes the topic
and answers it.

On a slave the writer is still the CommitLog's only writer: what it appends are REPLICA entries,
the master's bytes as the slave's replicator received them (``Appender.replicate``), committed as
above; a PUT is refused (SERVICE_NOT_AVAILABLE).
"""
from __future__ import annotations

import json
import logging
import os
import sys
import time

import numpy as np

from rocketbox.shm import protocol as P
from rocketbox.shm.histogram import Histogram
from rocketbox.shm.layout import C, H, S
from rocketbox.shm.ring import RingCorrupt
from rocketbox.shm.role import IDLE_S, LoopRole
from rocketbox.shm.tables import TableFull
from rocketbox.store import message, quarantine
from rocketbox.store.mappedfile import MappedFileQueue
from rocketbox.writer.append import Appender, refused
from rocketbox.writer.groups import ConsumerOffsets, SubscriptionGroups
from rocketbox.writer.topics import TopicTable
from rocketbox.writer.transactions import Ledger

log = logging.getLogger("rocketbox.writer")
SWITCH_INTERVAL_S = 0.001    # the GIL's hand-over while consumerOffset.json is written by its thread (the loop
                             # waits at most this, or the longest C call: ~3.6 ms at 65,536 offsets, 5 ms+ else)


class WriterService(LoopRole):
    def __init__(self, cfg, shared):
        super().__init__(log)
        self.cfg, self.sh = cfg, shared
        self.waker = shared.writer_waker
        self.ctl = shared.control
        self.commitlog: MappedFileQueue | None = None
        self.appender: Appender | None = None
        self.ledger = Ledger(cfg, shared)
        self.put_latency = Histogram(shared.views, H.PUT_LATENCY)
        self.commit_records = Histogram(shared.views, H.COMMIT_RECORDS)
        self.ring_wait = Histogram(shared.views, H.RING_WAIT)

    # ------------------------------------------------------------ lifecycle
    def open(self) -> "WriterService":
        sh, ctl = self.sh, self.ctl
        if not ctl[C.RECOVERED]:
            raise RuntimeError("store not recovered yet: the supervisor runs recovery before the writer starts")
        self.commitlog = MappedFileQueue(self.cfg.commitlog_dir, self.cfg.mappedFileSizeCommitLog, True).load()
        self.topics = TopicTable(self.cfg, sh.views, ctl, sh.writer_waker)
        self.topics.attach()
        self.topic_replies: list[tuple[int, tuple]] = []    # (ring, reply) of topics written, not yet pushed
        self.offsets = ConsumerOffsets(self.cfg, sh.views, ctl)
        self.offsets.attach()
        self.groups = SubscriptionGroups(self.cfg)
        if ctl[C.JOURNAL_WRITTEN] == ctl[C.WRITTEN]:       # killed after a commit, before releasing
            for i, ring in enumerate(sh.request_rings):
                if sh.slots[i, S.JOURNAL_READ_POS] > ring.read_pos:
                    ring.release(int(sh.slots[i, S.JOURNAL_READ_POS]))
        self._wait_dispatched()
        self.appender = Appender(self.cfg, sh, self.commitlog, self.topics.index)
        self.ledger.open()
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
        began = time.monotonic_ns()
        drained, taken = [], []          # (slot, end position); (slot, kind, payload) in ring order
        self.ledger.begin()
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
        ts = int(time.time() * 1000)     # after the rings were read: no record is stamped before it was asked
        self._commit(drained, taken, self._handle(taken, ts), ts)
        self._observe(taken, began)
        return True

    def _observe(self, taken, began_ns: int) -> None:
        """The pass's put latency (once for each record it was asked to append), each slab's wait
        in its ring before the pass (once per record), and the group commit's size."""
        records = 0
        for _i, kind, payload in taken:
            if (head := self._slab_head(kind, payload)) is not None and head[1]:
                _nq, n, _nb, pushed_ns = head
                self.ring_wait.observe(max(0, began_ns - pushed_ns) // 1000, n)
                records += n
        if records:
            self.put_latency.observe((time.monotonic_ns() - began_ns) // 1000, records)
            self.commit_records.observe(records)

    @staticmethod
    def _slab_head(kind: int, payload: np.ndarray) -> tuple | None:
        """A PUT or TX_END entry's SLAB_HEAD (n_requests, n_records, records_bytes, pushed_ns);
        None for another kind, or an entry too short to hold one."""
        if kind == P.TX_END:
            payload = payload[P.TX_END_HEAD.itemsize:]
        elif kind != P.PUT:
            return None
        return P.SLAB_HEAD_S.unpack_from(payload.data, 0) if len(payload) >= P.SLAB_HEAD.itemsize else None

    def _response_size(self, kind: int, payload: np.ndarray) -> int:
        if (head := self._slab_head(kind, payload)) is not None:
            n_requests, n_records, _bytes, _pushed = head
            n = P.RESULT_HEAD.itemsize + n_requests * P.RESULT.itemsize + n_records * 8
        elif kind in (P.OFFSET, P.GROUP):
            return 0
        elif kind in (P.REPLICA, P.CUT):
            n = P.REPLICA_RES.itemsize
        else:
            n = P.TOPIC_RES.itemsize
        return 2 * ((n + 8 + 7) & ~7)    # entry header and padding, twice for a possible wrap

    def _handle(self, taken, ts: int) -> list:
        """The reply to each taken entry.  Runs of PUT slabs (from any rings) are appended as one
        batch; a TOPIC request first lets the PUTs before it land, so ring order is kept."""
        assert self.appender is not None        # (open made it)
        replies: list = []
        run: list = []
        ends: list[tuple[int, int]] = []         # (index in run, half offset) of the TX_ENDs taken
        for i, kind, payload in taken + [(None, None, None)]:
            if kind == P.PUT:
                run.append(payload)
                continue
            if kind == P.TX_END and len(payload) > P.TX_END_HEAD.itemsize:
                half = int(payload[:P.TX_END_HEAD.itemsize].view(P.TX_END_HEAD)["half_queue_offset"][0])
                if self.ledger.take(half):       # appended with the PUTs around it, in ring order
                    ends.append((len(run), half))
                    run.append(payload[P.TX_END_HEAD.itemsize:])
                    continue
            if run:
                replies += self._put(run, ends, ts) if ends else self.appender.put(run, ts)
                run, ends = [], []
            if kind == P.TX_END:
                replies.append(self._tx_ended(payload))
            elif kind == P.TOPIC:
                replies.append(self._topic(i, payload))
            elif kind == P.REPLICA:
                replies.append(self._replica(payload))
            elif kind == P.CUT:
                replies.append(self._cut(payload))
            elif kind in (P.OFFSET, P.GROUP):
                self._group_state(kind, payload)
                replies.append(None)                     # (never answered)
            elif kind is not None:
                log.error("request ring entry of unknown kind %d (%d bytes) dropped", kind, len(payload))
                replies.append(None)
        return replies

    def _put(self, run: list, ends: list[tuple[int, int]], ts: int) -> list:
        """``appender.put`` of a run of slabs; a TX_END among them whose records were refused
        (a stop, a full table) leaves its transaction open."""
        assert self.appender is not None
        replies = self.appender.put(run, ts)
        for j, half in ends:
            reply = replies[j]
            if reply is None or any(s != P.SUCCESS for s in P.result_statuses(reply[1])):
                self.ledger.forget(half)
        return replies

    @staticmethod
    def _tx_ended(payload: np.ndarray):
        """The reply to a TX_END whose transaction was ended before: every request TX_ENDED."""
        try:
            requests = P.parse_slab(payload[P.TX_END_HEAD.itemsize:])[0]
        except P.BadSlab as e:
            log.error("TX_END entry refused whole: %s", e)
            return None if e.requests is None else refused(e.requests, P.SYSTEM_ERROR)
        return refused(requests, P.TX_ENDED)

    def _commit(self, drained, taken, replies, ts: int) -> None:
        sh, ctl = self.sh, self.ctl
        assert self.appender is not None
        self.ledger.commit()
        ctl[C.JOURNAL_WRITTEN] = -1
        for i, end in drained:
            sh.slots[i, S.JOURNAL_READ_POS] = end
        end = self.appender.write_pos
        ctl[C.JOURNAL_WRITTEN] = end
        ctl[C.WRITTEN_TS] = ts
        ctl[C.WRITTEN] = end                             # the commit point
        if self.cfg.sync_flush:                          # SYNC_FLUSH replies wait for it: first
            sh.flusher_waker.post()
        for (i, _kind, _payload), reply in zip(taken, replies):
            if reply is not None and not sh.response_rings[i].try_push(reply[0], reply[1]):
                log.error("response ring %d full despite the room check; a reply was dropped", i)
        for i, end in drained:
            sh.request_rings[i].release(end)
            sh.slot_wakers[i].post()
        sh.dispatcher_waker.post()                       # last: no reply waits for it

    def _replica(self, payload: np.ndarray):
        """A REPLICA entry (a slave's replicator): the master's bytes appended as they are."""
        assert self.appender is not None
        head = payload[:P.REPLICA_HEAD.itemsize].view(P.REPLICA_HEAD)[0]
        status = self.appender.replicate(int(head["offset"]), payload[P.REPLICA_HEAD.itemsize:])
        res = np.zeros(1, P.REPLICA_RES)
        res[0] = (int(head["req_id"]), status, 0, self.appender.write_pos)
        return P.REPLICA_RESULT, [res]

    def _cut(self, payload: np.ndarray):
        """A CUT entry (a slave's replicator, whose master lost its tail): the CommitLog cut back
        to ``offset``.  The bytes cut are kept in the quarantine first (``quarantine.keep_cut``);
        then ``written`` is lowered and ``cut_seq`` bumped, and once the dispatcher and the flusher
        have taken the cut (nothing reads past it any more) every byte from ``offset`` is zeroed,
        files kept (readers map them).  A writer killed on the way leaves the entry unreleased:
        the next one does it all again (each step is idempotent).  SUCCESS, or MISPLACED (not a
        slave, or ``offset`` past the end or before the first byte), or SERVICE_NOT_AVAILABLE
        (the bytes cut cannot be kept: nothing is cut)."""
        assert self.appender is not None
        head = payload[:P.REPLICA_HEAD.itemsize].view(P.REPLICA_HEAD)[0]
        to, end, ctl = int(head["offset"]), self.appender.write_pos, self.ctl
        status = P.SUCCESS
        if not self.cfg.slave or not int(ctl[C.MIN_PHYS]) <= to <= end:
            status = P.MISPLACED
        else:
            try:
                kept = quarantine.keep_cut(self.cfg.root, to, self.appender.read(to, end)) if to < end else None
            except OSError as e:
                log.error("cannot keep the CommitLog's bytes %d-%d that the master no longer has (%s): not cut",
                          to, end, e)
                status = P.SERVICE_NOT_AVAILABLE
            else:
                ctl[C.WRITTEN] = to               # first: a pass that sees the cut reads no further
                ctl[C.CUT_TO] = to
                ctl[C.CUT_SEQ] += 1
                self._cut_taken(int(ctl[C.CUT_SEQ]))
                self.appender.cut(to)
                if kept:
                    log.warning("CommitLog cut back from %d to %d, its master's end (the master lost its tail); "
                                "the %d bytes cut are kept in %s", end, to, end - to, kept)
        res = np.zeros(1, P.REPLICA_RES)
        res[0] = (int(head["req_id"]), status, 0, self.appender.write_pos)
        return P.REPLICA_RESULT, [res]

    def _cut_taken(self, seq: int) -> None:
        """Until the dispatcher and the flusher have taken cut ``seq`` (or are not running: they
        take it when they start, before reading a byte)."""
        ctl, sh, since = self.ctl, self.sh, time.monotonic()
        said = False
        while not ((ctl[C.CUT_DISPATCHED] == seq or not ctl[C.PID_DISPATCHER])
                   and (ctl[C.CUT_FLUSHED] == seq or not ctl[C.PID_FLUSHER])):
            sh.dispatcher_waker.post()
            sh.flusher_waker.post()
            time.sleep(0.001)
            if not said and time.monotonic() - since > 5:
                log.warning("the CommitLog's cut waits for the dispatcher and the flusher to take it")
                said = True

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

    # ------------------------------------------------------------ loop
    def run(self) -> None:
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        super().run()

    def turn(self) -> float:
        did = self.step()
        self.offsets.persist()
        self.topics.persist()
        self.groups.settle()
        return 0.0 if did else IDLE_S

    def drain(self) -> None:
        while self.step():     # what producers already queued
            pass
