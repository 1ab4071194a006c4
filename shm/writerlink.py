"""An asyncio process's link to the writer (a reader's, the gRPC front's): its ring slot seen from
asyncio.  Appends, topic creation, committed offsets and consumer-group updates go to the writer
through it, and the writer's replies come back through it, without ever blocking the event loop on
the writer.

The reader's service reads the replies (``on_wake``) when the slot's waker is posted (the writer
posts it after answering) and on its 1 s tick, so nothing hangs on a lost wake.

Appends are batched per loop turn: every request that arrives on any connection before the loop
comes round again goes into one slab (one ring entry; a new one when the entry or its reply would
not fit), held and growing while the writer still works on this reader's last slab.  No future or
task per message: each ``append`` (a loop turn's sends, together) carries one ``waiter`` callable,
called with its requests' outcomes when the slab's reply is read.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.shm import protocol as P
from rocketbox.shm.ringclient import LOST, SLAB_SLACK, RingClient
from rocketbox.shm.tables import OffsetIndex, TopicIndex

log = logging.getLogger("rocketbox.reader")
# flow control (FACTS §1.7): a send refused while the writer is stalled was never pushed, so never stored
REJECTED = (RC.SYSTEM_BUSY, "[REJECTREQUEST]system busy, start flow control for a while")
OVERLOAD = (RC.SYSTEM_BUSY, "[OVERLOAD]system busy, start flow control for a while")
CLEANED = "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: %dms, size of queue: %d"


class WriterLink:
    def __init__(self, cfg, shared, topics: TopicIndex, offsets: OffsetIndex):
        """Claims a ring slot (``slot``); ``topics`` and ``offsets``: the reader's views of the
        shared tables the writer fills, for the room checks before a request goes to it."""
        self.cfg, self.topics, self.offsets = cfg, topics, offsets
        self.ring = RingClient(cfg, shared).open()
        self.waker = self.ring.waker
        self.loop = asyncio.get_running_loop()
        self.slab: _Slab | None = None                              # this loop turn's appends
        self.slab_budget = self.ring.requests.max_entry - SLAB_SLACK
        self.slab_records = self.ring.responses.capacity // (4 * (P.RESULT.itemsize + 8))   # so its reply fits
        self.pushed_end = 0                                         # ring position past our last slab
        self.pushed_at = 0.0                                        # loop time it was pushed
        self.busy_after_s = cfg.osPageCacheBusyTimeOutMills / 1000  # writer unfinished that long: refuse sends
        self.held_max_s = cfg.waitTimeMillsInSendQueue / 1000       # a held slab that old: answered busy
        self.clean_timer: asyncio.TimerHandle | None = None
        self.topic_waits: dict[int, asyncio.Future] = {}
        self.creating: dict[str, asyncio.Future] = {}              # auto-creations under way, by topic
        self.offset_batch: list[tuple[bytes, int, int]] = []
        self.offsets_end = 0                                        # ring position past the last OFFSET entry
        self.apply_waits: list[tuple[int, asyncio.Future]] = []
        self.unapplied: dict[tuple[bytes, int], tuple[int, int]] = {}  # committed here, not yet in shm
        self.full_warned_at = float("-inf")   # when a full offset table was last logged
        # awaited after a topic this reader created or changed
        self.on_topic_change: Callable[[], Awaitable[Any]] | None = None

    @property
    def slot(self) -> int:
        return self.ring.slot

    def close(self) -> None:
        self.ring.close()

    # ------------------------------------------------------------ replies
    def on_wake(self) -> None:
        """Read every reply and settle what is done (on a post, and on the reader's tick)."""
        self.ring.poll()                    # calls each answered slab's _Slab.answered
        self.ring.check_writer()
        if self.slab is not None and not self.slab.scheduled:
            self._submit()                  # a held slab: the writer may be done with the last one
        for rid, fut in list(self.topic_waits.items()):
            res = self.ring.topic_replies.get(rid)
            if res is not None:
                del self.topic_waits[rid]
                self.ring.topic_replies.pop(rid, None)
                if not fut.done():
                    fut.set_result(res.status)
        if self.unapplied or self.apply_waits:
            done = self.ring.requests.read_pos
            self.unapplied = {k: v for k, v in self.unapplied.items() if v[1] > done}
            for end, fut in self.apply_waits:
                if end <= done and not fut.done():
                    fut.set_result(True)
            self.apply_waits = [(e, f) for e, f in self.apply_waits if not f.done()]

    # ------------------------------------------------------------ appends
    @property
    def busy(self) -> bool:
        """Appends not answered yet."""
        return bool(self.slab or self.ring.in_flight)

    def stalled(self) -> bool:
        """The writer has not finished our last slab for ``osPageCacheBusyTimeOutMills``: new
        sends are refused (REJECTED) rather than queued behind it, as RocketMQ refuses sends
        while its CommitLog lock is held that long."""
        return (self.ring.requests.read_pos < self.pushed_end
                and self.loop.time() - self.pushed_at >= self.busy_after_s)

    def append(self, rows: list[tuple], sizes: list[int], parts: list, waiter) -> None:
        """Queue requests for this loop turn's slab: their P.REQUEST rows, every record's size in
        request order, and the pieces (bytes-likes) whose concatenation is the records.
        ``waiter(first, n, results, phys, failure)`` gets the writer's P.RESULT tuples of requests
        ``first`` to ``first + n`` of ``rows`` and their records' physical offsets, or (None,
        None, (code, remark)) when the slab was lost (a restarted writer), could not be pushed
        (SYSTEM_BUSY when the ring had no room, OVERLOAD), or waited held longer than
        ``waitTimeMillsInSendQueue`` (SYSTEM_BUSY, TIMEOUT_CLEAN_QUEUE): one call, or one per
        slab when the requests do not all fit one (each slab takes whole requests)."""
        nbytes = P.REQUEST.itemsize * len(rows) + sum(sizes) + 4 * len(sizes)
        slab = self.slab
        if slab is not None and (slab.nbytes + nbytes > self.slab_budget
                                 or len(slab.sizes) + len(sizes) > self.slab_records):
            self.slab = None
            self._push(slab)
        if nbytes > self.slab_budget or len(sizes) > self.slab_records:
            self._append_split(rows, sizes, b"".join(parts), waiter)
        else:
            self._slab().add(rows, sizes, parts, nbytes, waiter, 0)

    def _slab(self) -> "_Slab":
        if self.slab is None:
            self.slab = _Slab()
            self.loop.call_soon(self._submit)
        return self.slab

    def _append_split(self, rows: list[tuple], sizes: list[int], data: bytes, waiter) -> None:
        """``append`` of more than a slab holds: whole requests per slab, all but the last pushed."""
        view, first, rec, at = memoryview(data), 0, 0, 0
        while first < len(rows):
            last, end_rec, nbytes, size = first, rec, 0, 0
            while last < len(rows):                      # a lone request always fits (RingClient._fits)
                count = rows[last][P.REQUEST_AT.count]
                held = sum(sizes[end_rec:end_rec + count])
                more = P.REQUEST.itemsize + held + 4 * count
                if last > first and (nbytes + more > self.slab_budget or end_rec + count - rec > self.slab_records):
                    break
                last, end_rec, nbytes, size = last + 1, end_rec + count, nbytes + more, size + held
            slab = self._slab()
            slab.add(rows[first:last], sizes[rec:end_rec], [view[at:at + size]], nbytes, waiter, first)
            if last < len(rows):
                self.slab = None
                self._push(slab)
            first, rec, at = last, end_rec, at + size

    def _submit(self) -> None:
        """End of a loop turn: push the slab, unless the writer has not finished with the last
        one yet.  Then the slab is held and grows until the writer's answer wakes us: under load
        each writer pass gets one slab per reader instead of one per loop turn (each slab costs
        the writer and this loop a fixed amount), and an idle writer gets it at once."""
        slab = self.slab
        if slab is None:
            return
        slab.scheduled = False
        if self.ring.requests.read_pos < self.pushed_end:
            if not slab.held_at:
                slab.held_at = self.loop.time()
                if self.clean_timer is None:
                    self.clean_timer = self.loop.call_later(self.held_max_s, self._clean_held)
            return
        self.slab = None
        self._push(slab)

    def _clean_held(self) -> None:
        """The timer armed when a slab is first held: a slab held ``waitTimeMillsInSendQueue``
        or longer (the writer has not finished the last one) is answered SYSTEM_BUSY, as
        RocketMQ's BrokerFastFailure cleans its send queue: nothing of it was pushed, so nothing
        of it is stored.  A younger held slab re-arms it; one timer at a time."""
        self.clean_timer = None
        slab = self.slab
        if slab is None or not slab.held_at or slab.scheduled:
            return
        waited = self.loop.time() - slab.held_at
        if waited < self.held_max_s:
            self.clean_timer = self.loop.call_later(self.held_max_s - waited, self._clean_held)
            return
        self.slab = None
        slab.answered(None, None, (RC.SYSTEM_BUSY, CLEANED % (waited * 1000, len(slab.rows))))

    def _push(self, slab: "_Slab") -> None:
        try:
            if not self.ring.push_rows(slab.rows, slab.sizes, b"".join(slab.records), slab.answered, block=False):
                slab.answered(None, None, OVERLOAD)          # the ring is full: the writer is far behind
                return
            self.pushed_end, self.pushed_at = self.ring.requests.write_pos, self.loop.time()
        except Exception as e:              # e.g. a request larger than a ring entry
            slab.answered(None, None, (RC.SYSTEM_ERROR, str(e)))

    async def appended(self, rows: list[tuple], sizes: list[int], parts: list) -> tuple[list | None, tuple[int, str]]:
        """``append`` awaited: -> (the writer's P.RESULT tuples of every request, in order; the
        failure (code, remark) of a slab that was not stored) -- (None, its failure) when one was
        not, though the requests of another slab may have been (when they did not fit one)."""
        done: asyncio.Future = self.loop.create_future()
        results: list = [None] * len(rows)
        left = [len(rows)]

        def answered(first, n, res, _phys, failure):
            if res is None:
                if not done.done():
                    done.set_result(failure)
                return
            results[first:first + len(res)] = res
            left[0] -= len(res)
            if left[0] <= 0 and not done.done():
                done.set_result(None)
        self.append(rows, sizes, parts, answered)
        failure = await done
        return (None, failure) if failure is not None else (results, (RC.SUCCESS, ""))

    async def put(self, tidx: int, queue_id: int, sys_flag: int, record: bytes) -> str | None:
        """One whole record (a send-back's copy) through this loop turn's slab -> None once the
        writer stored it, else why not."""
        results, failure = await self.appended([(0, tidx, queue_id, sys_flag, 1, 0, 0)], [len(record)], [record])  # a P.REQUEST row
        if results is None:
            return failure[1]
        status = results[0][P.RESULT_AT.status]
        return None if status == P.SUCCESS else f"PUT_MESSAGE_FAILED (writer status {status})"

    async def end_transaction(self, half_offset: int, rows: list[tuple], sizes: list[int],
                              records: bytes) -> tuple[list, list] | tuple[int, str]:
        """The records that end the transaction of the half at ``half_offset`` (the committed
        message and its op record, or the op record alone) as one TX_END entry, pushed at once
        -> (P.RESULT tuples, physical offsets) once the writer answered (every status TX_ENDED
        when the transaction was ended before), or (code, remark) when it could not be stored."""
        done: asyncio.Future = self.loop.create_future()

        def answered(res, phys, failure=(RC.SYSTEM_ERROR, LOST)):
            if not done.done():
                done.set_result(failure if res is None or phys is None else (res, phys))
        try:
            if not self.ring.push_rows(rows, sizes, records, answered, block=False, half_offset=half_offset):
                return OVERLOAD
        except Exception as e:          # e.g. more than a ring entry holds
            return RC.SYSTEM_ERROR, str(e)
        self.pushed_end, self.pushed_at = self.ring.requests.write_pos, self.loop.time()
        result: tuple[list, list] | tuple[int, str] = await done
        return result

    # ------------------------------------------------------------ topics
    def creation_failed(self, topic: str, status: int) -> str:
        """The remark for a topic the writer did not create."""
        if status == P.TOPICS_FULL:
            return (f"create topic[{topic}] failed: the broker's topic table is full "
                    f"({len(self.topics.names)} topics, shmTopicSlots)")
        return f"create topic[{topic}] failed (writer status {status})"

    async def create_topic(self, tc: dict, timeout_s: float = 10.0) -> int:
        rid = self.ring.push_topic(tc)
        fut = self.loop.create_future()
        self.topic_waits[rid] = fut
        try:
            status = await asyncio.wait_for(fut, timeout_s)
        finally:
            self.topic_waits.pop(rid, None)
            self.ring.topic_replies.pop(rid, None)
        if status == P.SUCCESS and self.on_topic_change is not None:
            await self.on_topic_change()
        return status

    async def auto_create_topic(self, tc: dict) -> int:
        """``create_topic`` of a topic a request found missing (a send's auto-creation, a group's
        retry topic), once: the requests that find it missing while its creation is under way
        (a pipelining producer's first sends) share that creation, as RocketMQ's broker creates
        such a topic under a lock, not once per request."""
        name = tc["topicName"]
        pending = self.creating.get(name)
        if pending is None:
            pending = self.creating[name] = asyncio.ensure_future(self.create_topic(tc))
            pending.add_done_callback(lambda _f: self.creating.pop(name, None))
        return await asyncio.shield(pending)

    # ------------------------------------------------------------ consumer groups
    def commit_offset(self, key: bytes, queue_id: int, offset: int) -> bool:
        """Queue a committed offset for the writer; False (and a warning now and then) when the
        shared table is full and does not hold this one yet."""
        if (key, queue_id) not in self.unapplied and not self.offsets.has_room(key, queue_id):
            now = self.loop.time()
            if now - self.full_warned_at >= 60:
                self.full_warned_at = now
                log.warning("consumer offsets of new (topic@group, queue)s are refused: the table is full "
                            "(%d offsets; raise shmOffsetSlots)", len(self.offsets.keys))
            return False
        if not self.offset_batch:
            self.loop.call_soon(self._push_offsets)
        self.offset_batch.append((key, queue_id, offset))
        return True

    def _push_offsets(self) -> None:
        if not self.offset_batch:
            return
        rows = np.array([(key, qid, 0, off) for key, qid, off in self.offset_batch], P.OFFSET_UPDATE)
        end = self.offsets_end = self.ring.push_offsets(rows)
        for key, qid, off in self.offset_batch:
            self.unapplied[(key, qid)] = (off, end)
        self.offset_batch = []

    async def offsets_applied(self, timeout_s: float = 3.0) -> bool:
        """Wait until the writer has applied every offset committed so far (so any reader sees them)."""
        if self.offset_batch:
            self._push_offsets()
        if self.ring.requests.read_pos >= self.offsets_end:
            return True
        fut = self.loop.create_future()
        self.apply_waits.append((self.offsets_end, fut))
        try:
            return await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            return False

    def committed_offset(self, key: bytes, queue_id: int) -> int | None:
        """The group's committed offset: what this reader committed last if the writer has not
        applied it yet (read-your-writes), else the shared table's."""
        mine = self.unapplied.get((key, queue_id))
        if mine is not None and mine[1] > self.ring.requests.read_pos:
            return mine[0]
        return self.offsets.get(key, queue_id)

    def push_group(self, sg: dict) -> None:
        self.ring.push_group(sg)


class _Slab:
    """The requests of one ring entry and who waits for them: spans of (waiter, first, n)."""
    __slots__ = ("rows", "sizes", "records", "spans", "nbytes", "scheduled", "held_at")

    def __init__(self):
        self.rows, self.sizes, self.records, self.spans, self.nbytes = [], [], [], [], 0
        self.scheduled = True           # a _submit is due at the end of this loop turn
        self.held_at = 0.0              # loop time a _submit first held it (the writer busy)

    def add(self, rows: list[tuple], sizes: list[int], parts: list, nbytes: int, waiter, first: int) -> None:
        self.rows += rows
        self.sizes += sizes
        self.records += parts
        self.nbytes += nbytes
        self.spans.append((waiter, first, len(rows)))

    def answered(self, res: list | None, phys: list | None, failure: tuple[int, str] = (RC.SYSTEM_ERROR, LOST)) -> None:
        """The writer's reply: P.RESULT tuples and each record's physical offset (``res`` None:
        lost with a restarted writer, or ``failure``, a response code and remark)."""
        i = j = 0
        for waiter, first, n in self.spans:
            if res is None or phys is None:
                part, got, why, m = None, None, failure, 0
            else:
                part, why = res[i:i + n], None
                m = sum([r[P.RESULT_AT.count] for r in part])
                got = phys[j:j + m]
            try:
                waiter(first, n, part, got, why)
            except Exception:       # one broken waiter must not cost the others their replies
                log.exception("append waiter failed")
            i, j = i + n, j + m
