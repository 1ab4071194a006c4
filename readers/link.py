"""A reader's asyncio face of its ring slot: appends, flush waits, long-poll waits, topic
creation and consumer-group updates, without ever blocking the event loop on the writer.

One thread blocks on the slot's semaphore (the writer posts it after answering, the flusher when a
waited-for offset is on disk, the dispatcher when new messages are dispatched and ``dispatch_wait``
is set) and hands each wake to the loop.  The loop then reads every reply in one go and settles
what they complete.  Sends are batched per loop turn: every request that arrives on any connection
before the loop comes round again goes to the writer as one ``submit`` (one ring entry).
"""
from __future__ import annotations

import asyncio
import threading

import numpy as np

from readers.storeview import StoreView
from shm.layout import C, S
from shm.tables import OffsetIndex, TopicIndex
from writer import protocol as P
from writer.client import PutRequest, PutResult, RingClient


class WriterLink:
    def __init__(self, cfg, shared):
        self.cfg, self.sh, self.ctl = cfg, shared, shared.control
        self.ring = RingClient(cfg, shared).open()
        self.view = StoreView(cfg, shared, self.ring.slot).open()
        self.topics = TopicIndex(shared.views, shared.control)
        self.offsets = OffsetIndex(shared.views, shared.control)
        self.row = shared.slots[self.ring.slot]
        self.loop = asyncio.get_running_loop()
        self.batch: list[tuple[PutRequest, asyncio.Future]] = []
        self.in_flight: list[tuple[object, list]] = []          # (ticket, futures in request order)
        self.flush_waits: list[tuple[int, asyncio.Future]] = []
        self.polls: list[tuple[str, int, int, asyncio.Future]] = []   # long polls: topic, queue, offset
        self.topic_waits: dict[int, asyncio.Future] = {}
        self.offset_batch: list[tuple[bytes, int, int]] = []
        self.offsets_end = 0                                        # ring position past the last OFFSET entry
        self.apply_waits: list[tuple[int, asyncio.Future]] = []
        self.unapplied: dict[tuple[bytes, int], tuple[int, int]] = {}  # committed here, not yet in shm
        self.wake_pending = False
        self.stopping = False
        self.on_topic_change = None                # called after a topic this reader created or changed
        self.thread = threading.Thread(target=self._wait_thread, name="slot-waker", daemon=True)
        self.thread.start()

    @property
    def slot(self) -> int:
        return self.ring.slot

    def close(self) -> None:
        self.stopping = True
        self.ring.waker.post()
        self.thread.join(2.0)
        self.view.close()
        self.ring.close()

    # ------------------------------------------------------------ wakes
    def _wait_thread(self) -> None:
        waker = self.ring.waker
        while not self.stopping:
            posted = waker.wait(1.0)
            if self.stopping:
                return
            if posted and not self.wake_pending:
                self.wake_pending = True
                self.loop.call_soon_threadsafe(self._on_wake)

    def _on_wake(self) -> None:
        self.wake_pending = False
        self.ring.poll()
        self.ring._check_writer()
        if self.in_flight:
            still = []
            for ticket, futs in self.in_flight:
                if ticket.done:
                    for fut, res in zip(futs, ticket.put_results()):
                        if not fut.done():
                            fut.set_result(res)
                else:
                    still.append((ticket, futs))
            self.in_flight = still
        for rid, fut in list(self.topic_waits.items()):
            res = self.ring.topic_replies.get(rid)
            if res is not None:
                del self.topic_waits[rid]
                self.ring.topic_replies.pop(rid, None)
                if not fut.done():
                    fut.set_result(res.status)
        if self.flush_waits:
            self._settle_flushes()
        if self.polls:
            self._settle_polls()
        if self.unapplied or self.apply_waits:
            done = self.ring.requests.read_pos
            self.unapplied = {k: v for k, v in self.unapplied.items() if v[1] > done}
            for end, fut in self.apply_waits:
                if end <= done and not fut.done():
                    fut.set_result(True)
            self.apply_waits = [(e, f) for e, f in self.apply_waits if not f.done()]

    # ------------------------------------------------------------ appends
    def put(self, req: PutRequest) -> asyncio.Future:
        """Queue one request for this loop turn's slab; the future gets its PutResult."""
        fut = self.loop.create_future()
        if not self.batch:
            self.loop.call_soon(self._submit)
        self.batch.append((req, fut))
        return fut

    def _submit(self) -> None:
        batch, self.batch = self.batch, []
        try:
            ticket = self.ring.submit([r for r, _ in batch])
        except Exception as e:              # e.g. a request larger than a ring entry
            for _r, fut in batch:
                if not fut.done():
                    fut.set_result(PutResult(P.SYSTEM_ERROR, remark=str(e)))
            return
        self.in_flight.append((ticket, [f for _, f in batch]))
        if ticket.done:                     # everything refused before reaching the writer
            self._on_wake()

    # ------------------------------------------------------------ SYNC_FLUSH
    async def flushed(self, end_offset: int, timeout_s: float) -> bool:
        if self.ctl[C.FLUSHED] >= end_offset:
            return True
        fut = self.loop.create_future()
        self.flush_waits.append((end_offset, fut))
        self._publish_flush_wait()
        try:
            return await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            return False
        finally:
            self.flush_waits = [(e, f) for e, f in self.flush_waits if f is not fut]
            self._publish_flush_wait()

    def _publish_flush_wait(self) -> None:
        self.row[S.FLUSH_WAIT] = min((e for e, f in self.flush_waits), default=0)
        if self.flush_waits:
            self.sh.flusher_waker.post()

    def _settle_flushes(self) -> None:
        flushed = int(self.ctl[C.FLUSHED])
        for end, fut in self.flush_waits:
            if end <= flushed and not fut.done():
                fut.set_result(True)

    # ------------------------------------------------------------ long polling
    async def grown(self, topic: str, queue_id: int, offset: int, timeout_s: float) -> bool:
        """Wait until the queue's published max offset passes ``offset``; False on time-out."""
        fut = self.loop.create_future()
        entry = (topic, queue_id, offset, fut)
        self.polls.append(entry)
        self.row[S.DISPATCH_WAIT] = 1
        self._settle_polls()                # it may have grown since the pull looked
        try:
            return await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            return False
        finally:
            self.polls = [p for p in self.polls if p is not entry]
            if not self.polls:
                self.row[S.DISPATCH_WAIT] = 0

    def _settle_polls(self) -> None:
        for topic, qid, offset, fut in self.polls:
            if not fut.done():
                off = self.view.offsets(topic, qid)
                if off is not None and off[1] > offset:
                    fut.set_result(True)

    # ------------------------------------------------------------ topics
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
            self.on_topic_change()
        return status

    # ------------------------------------------------------------ consumer groups
    def commit_offset(self, key: bytes, queue_id: int, offset: int) -> None:
        if not self.offset_batch:
            self.loop.call_soon(self._push_offsets)
        self.offset_batch.append((key, queue_id, offset))

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
