"""The 5.x SimpleConsumer's methods over 4.x queues, as the 5.x proxy serves them in cluster mode:
``ReceiveMessage`` (long polling, invisible time), ``AckMessage``, ``ChangeInvisibleDuration``,
``ForwardMessageToDeadLetterQueue``, and the re-delivery of what was not acked in time, its
attempt counted, to the group's dead-letter queue (``%DLQ%<group>``) once it was delivered
``retryMaxTimes + 1`` times.  The state (``grpcfront/leases.py``) is this object's alone.

A receive takes any of the topic's readable queues, from a rotating start: the request's queue
names only the broker, as the 5.x proxy takes it (its pop names queue -1), so a consumer long
polling does not wait on one queue while another holds messages.  From each queue the leases due again
first, then messages never handed out (``StoreView.pull``, with the tag or SQL92 filter), each a
lease of the request's invisible time.  A FIFO group (``consumeMessageOrderly``, as 5.x's group
config) takes nothing from a queue while any of its messages is invisible.  Finding nothing, the
receive is held (``shm/holds.py``) until the queue grows, a lease falls due or its long-polling time
is over.  Every change is journaled before the client hears of it.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time

from rocketbox.grpcfront import convert, leases
from rocketbox.grpcfront.leases import Lease, QueueState
from rocketbox.remoting import sql92
from rocketbox.shm.holds import HeldPulls
from rocketbox.shm.layout import S, T
from rocketbox.store import filters, message
from rocketbox.store import view as SV
from rocketbox.store.groupconfig import DLQ_PREFIX, offset_key, returned_properties
from rocketbox.store.topicconfig import PERM_READ, PERM_RW, topic_config

log = logging.getLogger("rocketbox.grpcfront")
MAX_INVISIBLE_MS = 12 * 3600 * 1000            # the 5.x proxy's maxInvisibleTimeMills
AUTO_RENEW_INVISIBLE_MS = 60_000               # a push consumer's lease (auto_renew), its defaultInvisibleTimeMills
DEFAULT_POLL_MS = 20_000
MAX_BATCH = 32
DLQ_RETRY_MS = 5_000                            # a dead-letter copy that failed is tried again after this


def now_ms() -> int:
    return int(time.time() * 1000)


def max_deliveries(sg: dict | None) -> int:
    """How often a group's message is delivered before the dead-letter queue: its retryMaxTimes
    (RocketMQ's default 16 for a group not configured) and the first delivery, as the 5.x proxy."""
    return int((sg or {}).get("retryMaxTimes", 16)) + 1


class Refused(Exception):
    def __init__(self, code: str, why: str):
        super().__init__(why)
        self.code = code


class SimpleConsumers:
    def __init__(self, front):
        """``front``: the gRPC front (its ``ReaderContext``: view, link, topics, groups, loop; its protocol)."""
        self.f, self.cfg, self.proto = front, front.cfg, front.proto
        self.journal = leases.Journal(os.path.join(self.cfg.root, "grpc", "leases.journal"))
        self.states: dict[leases.Key, QueueState] = self.journal.replay()
        self.journal.open()
        for (key, qid), st in self.states.items():            # the offset table may be ahead (an admin's reset)
            table = front.link.committed_offset(key, qid)
            if table is not None and table > st.committed:
                st.jump(table)
        self.polls = HeldPulls(front.view.queues, front.loop, front.sh.slots[front.slot], front.view.tags)
        self.wakers: dict[asyncio.Future, int] = {}           # held receives -> when a lease of theirs falls due
        self.min_invisible_ms = self.cfg.grpcMinInvisibleTimeMs
        self.dead_lettering: set[tuple[bytes, int, int]] = set()
        self.counts = memoryview(front.sh.slots[front.slot])
        self.journal_warned_at = -60_000

    def close(self) -> None:
        self.journal.close()

    # ------------------------------------------------------------ the front's tick and wakes
    def settle(self) -> None:
        if self.polls:
            self.polls.settle()

    def tick(self) -> None:
        """Once a second: wake held receives whose queues have leases due; move the leases past
        their last attempt to the dead-letter queue; sync the journal; compact it when large."""
        now = now_ms()
        for fut, due_ms in list(self.wakers.items()):
            if not fut.done() and due_ms <= now:
                fut.set_result(True)
        for (key, qid), st in list(self.states.items()):
            due = [o for o in st.due(now) if st.leases[o].deadline_ms < leases.NEVER]
            if not due:
                continue
            topic, _at, group = key.decode().partition("@")
            most = max_deliveries(self.f.group(group))
            for o in due:
                if st.leases[o].attempt >= most:
                    self._dead_letter_soon(key, qid, o, group, topic, "its attempts are used up")
        try:
            self.journal.sync()
            if self.journal.size() > leases.COMPACT_BYTES:
                self.journal.compact(self.states)
        except OSError as e:              # (a full disk: the front keeps serving; the next tick tries again)
            if now - self.journal_warned_at >= 60_000:
                self.journal_warned_at = now
                log.error("the leases' journal %s cannot be synced or compacted: %s", self.journal.path, e)

    # ------------------------------------------------------------ receive
    async def receive(self, request, context):
        proto = self.proto
        R = proto.ReceiveMessageResponse
        try:
            plan = self._receive_plan(request)
        except Refused as e:
            yield self.f.status(R(), e.code, str(e))
            return
        remaining = context.time_remaining()
        wait_s = plan["poll_ms"] / 1000
        if remaining is not None:
            wait_s = min(wait_s, max(0.0, remaining - 1.0))   # answered before the client gives up
        deadline = time.monotonic() + wait_s
        while True:
            got = self._take(plan)
            if got or time.monotonic() >= deadline:
                break
            await self._held(plan, deadline)
        self.journal.write()
        row = self.counts                      # (what the metrics' messages and bytes out sum, as a reader's pulls)
        if not got:
            row[S.PULLS_MISSED] += 1
            yield self.f.status(R(), "MESSAGE_NOT_FOUND", "no new message")
            return
        row[S.PULLS_FOUND] += 1
        row[S.PULLED_MSGS] += len(got)
        row[S.PULLED_BYTES] += sum(len(m.body) for m in got)
        yield self.f.status(R(), "OK", "OK")
        for m in got:
            r = R()
            r.message.CopyFrom(m)
            yield r
        r = R()
        r.delivery_timestamp.FromMilliseconds(now_ms())
        yield r

    def _receive_plan(self, request) -> dict:
        """What a receive asks, checked: Refused(code, why) as the 5.x proxy refuses it."""
        group, topic = request.group.name, request.message_queue.topic.name
        if not group:
            raise Refused("ILLEGAL_CONSUMER_GROUP", "consumerGroup cannot be empty")
        meta = self.f.topics.live(topic)[1]
        if meta is None:
            raise Refused("TOPIC_NOT_FOUND", f"topic {topic} not found")
        sg = self.f.group(group)
        if sg is None:
            raise Refused("CONSUMER_GROUP_NOT_FOUND", f"consumer group {group} not found")
        if not sg.get("consumeEnable", True) or not meta[T.PERM] & PERM_READ:
            raise Refused("FORBIDDEN", f"consumer group {group} may not consume topic {topic} here")
        if request.batch_size <= 0:
            raise Refused("BAD_REQUEST", f"batch size {request.batch_size} is not positive")
        if request.auto_renew or not request.HasField("invisible_duration"):
            invisible_ms = AUTO_RENEW_INVISIBLE_MS
        else:
            invisible_ms = request.invisible_duration.ToMilliseconds()
            if not self.min_invisible_ms <= invisible_ms <= MAX_INVISIBLE_MS:
                raise Refused("ILLEGAL_INVISIBLE_TIME", f"the invisible time {invisible_ms} ms is not within "
                                                        f"[{self.min_invisible_ms}, {MAX_INVISIBLE_MS}] ms")
        reads = meta[T.READ_QUEUE_NUMS]
        if not reads:
            raise Refused("FORBIDDEN", f"topic {topic} has no queue to read")
        codes, keep = None, None
        fe = request.filter_expression
        kind = fe.type if request.HasField("filter_expression") else 0
        if kind == self.proto.enum("FilterType", "SQL"):
            try:
                keep = filters.sql_filter(fe.expression)
            except sql92.SQLError as e:
                raise Refused("ILLEGAL_FILTER_EXPRESSION", f"the SQL92 filter does not parse: {e}") from None
        elif fe.expression:
            codes = filters.tag_codes(fe.expression)
        try:
            key = offset_key(topic, group)
        except ValueError as e:
            raise Refused("BAD_REQUEST", str(e)) from None
        poll_ms = request.long_polling_timeout.ToMilliseconds() if request.HasField("long_polling_timeout") else DEFAULT_POLL_MS
        return {"topic": topic, "group": group, "key": key, "qids": list(range(reads)),
                "batch": min(request.batch_size, MAX_BATCH), "invisible_ms": invisible_ms, "codes": codes,
                "keep": keep, "fifo": bool(sg.get("consumeMessageOrderly", False)),
                "most": max_deliveries(sg), "poll_ms": max(0, poll_ms)}

    def state(self, key: bytes, qid: int, topic: str) -> QueueState:
        st = self.states.get((key, qid))
        if st is None:
            st = self.states[(key, qid)] = QueueState(self._start(key, qid, topic))
            self.journal.committed(key, qid, st.committed)
        return st

    def _start(self, key: bytes, qid: int, topic: str) -> int:
        """Where a group's first receive on a queue starts: its committed offset; else, as 5.x's
        pop (ConsumeInitMode.MAX), the start of a queue whose first message is in memory, else its
        last message."""
        off = self.f.link.committed_offset(key, qid)
        if off is not None and off >= 0:
            return off
        lo_hi = self.f.view.offsets(topic, qid)
        if lo_hi is None:
            return 0
        lo, hi = lo_hi
        first = self.f.view.entries(topic, qid, lo, 1)
        if lo <= 0 and (not len(first) or not self.f.view.on_disk(int(first["phys"][0]))):
            return 0
        return max(lo, hi - 1)

    def _take(self, plan: dict) -> list:
        """Up to the batch's messages from the plan's queues, each leased; [] when none is ready."""
        out: list = []
        qids = plan["qids"]
        start = int(time.monotonic() * 1000) % len(qids)
        for qid in qids[start:] + qids[:start]:
            if len(out) >= plan["batch"]:
                break
            out.extend(self._take_queue(plan, qid, plan["batch"] - len(out)))
        return out

    def _take_queue(self, plan: dict, qid: int, want: int) -> list:
        key, topic = plan["key"], plan["topic"]
        st = self.state(key, qid, topic)
        now = now_ms()
        if plan["fifo"] and st.busy(now):
            return []
        out: list = []
        for o in st.due(now):                          # again, what was not acked in time
            if len(out) >= want:
                return out
            lease = st.leases[o]
            if lease.deadline_ms >= leases.NEVER:
                continue
            if lease.attempt >= plan["most"]:
                self._dead_letter_soon(key, qid, o, plan["group"], topic, "its attempts are used up")
                if plan["fifo"]:
                    return out
                continue
            stored = self._stored(topic, qid, o)
            if stored is None:                          # gone (retention): nothing to deliver
                self._acked(key, qid, st, o)
                continue
            out.append(self._lease(key, qid, st, o, lease.attempt + 1, plan["invisible_ms"], stored))
        if len(out) >= want or (plan["fifo"] and out):
            return out
        p = self.f.view.pull(topic, qid, st.next, want - len(out), plan["codes"], self.cfg.maxTransferBytesOnMessageInMemory,
                             None, plan["keep"])
        if p.status == SV.OFFSET_MOVED and st.next < p.min_offset:
            st.jump(p.min_offset)                       # (retention took what was never received)
            self.journal.committed(key, qid, st.committed)
            self.f.link.commit_offset(key, qid, st.committed)
            return out
        if p.status not in (SV.FOUND, SV.NO_MATCHED):
            return out
        first, taken = st.next, set()
        if p.status == SV.FOUND:
            for head, body, rtopic, props in message.record_fields(p.body(), "pulled"):
                taken.add(head.queue_offset)
                out.append(self._lease(key, qid, st, head.queue_offset, 1, plan["invisible_ms"],
                                       (head, body, rtopic, props)))
        for o in range(first, p.next_offset):           # stepped over: the filter did not take them
            if o not in taken:
                self._acked(key, qid, st, o)
        st.next = max(st.next, p.next_offset)
        return out

    def _stored(self, topic: str, qid: int, offset: int):
        e = self.f.view.entries(topic, qid, offset, 1)
        if not len(e):
            return None
        s = self.f.view.stored(int(e["phys"][0]), int(e["size"][0]))
        return None if s is None else (s.head, s.body, s.topic, s.props)

    def _lease(self, key: bytes, qid: int, st: QueueState, offset: int, attempt: int, invisible_ms: int, stored):
        lease = Lease(attempt, now_ms() + invisible_ms, leases.new_nonce())
        st.leases[offset] = lease
        st.next = max(st.next, offset + 1)
        self.journal.leased(key, qid, offset, lease)
        head, body, topic, props = stored
        return convert.message_of(self.proto, head, body, topic, props, receipt_handle=leases.handle(qid, offset, lease.nonce),
                                  attempt=attempt, invisible_ms=invisible_ms)

    def _acked(self, key: bytes, qid: int, st: QueueState, offset: int) -> None:
        self.journal.acked(key, qid, offset)
        if st.ack(offset):
            self.f.link.commit_offset(key, qid, st.committed)

    async def _held(self, plan: dict, deadline: float) -> None:
        """Until one of the plan's queues grows, one of its leases falls due, or ``deadline``."""
        fut = self.f.loop.create_future()
        due = [d for qid in plan["qids"] if (d := self.state(plan["key"], qid, plan["topic"]).next_deadline()) is not None]
        self.wakers[fut] = min(due) if due else leases.NEVER     # (the tick wakes it then)

        def grew(_grew: bool) -> None:
            if not fut.done():
                fut.set_result(True)
        timeout = max(0.0, deadline - time.monotonic())
        for qid in plan["qids"]:
            self.polls.hold(plan["topic"], qid, self.state(plan["key"], qid, plan["topic"]).next, plan["codes"], timeout, grew)
        try:
            await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            pass
        finally:
            self.wakers.pop(fut, None)

    # ------------------------------------------------------------ ack, invisible time, DLQ
    def _leased(self, group: str, topic: str, receipt_handle: str) -> tuple[bytes, int, QueueState, int, Lease | None]:
        """The lease a receipt handle names -> (key, queue id, its state, offset, the lease, None
        when the message was acked already); Refused when the handle is not (or no longer) one."""
        if self.f.topics.live(topic)[1] is None:
            raise Refused("TOPIC_NOT_FOUND", f"topic {topic} not found")
        if self.f.group(group) is None:
            raise Refused("CONSUMER_GROUP_NOT_FOUND", f"consumer group {group} not found")
        try:
            qid, offset, nonce = leases.parse(receipt_handle)
            key = offset_key(topic, group)
        except ValueError as e:
            raise Refused("INVALID_RECEIPT_HANDLE", str(e)) from None
        st = self.states.get((key, qid))
        lease = st.leases.get(offset) if st is not None else None
        if st is None or (lease is None and not st.acked_already(offset)):
            raise Refused("INVALID_RECEIPT_HANDLE", f"no message of {topic} queue {qid} was received with this receipt handle")
        if lease is not None and (lease.nonce != nonce or lease.deadline_ms <= now_ms()):
            raise Refused("INVALID_RECEIPT_HANDLE", "receipt handle is expired")
        return key, qid, st, offset, lease

    async def ack(self, request, _context):
        proto = self.proto
        response = proto.AckMessageResponse()
        if not request.entries:
            return self.f.status(response, "BAD_REQUEST", "no entry to ack")
        codes = []
        for e in request.entries:
            entry = response.entries.add()
            entry.message_id, entry.receipt_handle = e.message_id, e.receipt_handle
            try:
                key, qid, st, offset, lease = self._leased(request.group.name, request.topic.name, e.receipt_handle)
                if lease is not None:
                    self._acked(key, qid, st, offset)
                code, why = "OK", "OK"
            except Refused as r:
                code, why = r.code, str(r)
            self.f.status(entry, code, why)
            codes.append((code, why))
        self.journal.write()
        failed = [c for c in codes if c[0] != "OK"]
        if not failed:
            return self.f.status(response)
        if len(codes) == 1:
            return self.f.status(response, *failed[0])
        return self.f.status(response, "MULTIPLE_RESULTS", "some entries failed")

    async def change_invisible(self, request, _context):
        response = self.proto.ChangeInvisibleDurationResponse()
        try:
            ms = request.invisible_duration.ToMilliseconds()
            if not 0 < ms <= MAX_INVISIBLE_MS:
                raise Refused("ILLEGAL_INVISIBLE_TIME", f"the invisible time {ms} ms is not within (0, {MAX_INVISIBLE_MS}] ms")
            key, qid, st, offset, lease = self._leased(request.group.name, request.topic.name, request.receipt_handle)
            if lease is None:
                raise Refused("INVALID_RECEIPT_HANDLE", "the message was acked already")
        except Refused as r:
            return self.f.status(response, r.code, str(r))
        lease = st.leases[offset] = Lease(lease.attempt, now_ms() + ms, leases.new_nonce())
        self.journal.leased(key, qid, offset, lease)
        self.journal.write()
        response.receipt_handle = leases.handle(qid, offset, lease.nonce)
        return self.f.status(response)

    async def forward_to_dlq(self, request, _context):
        response = self.proto.ForwardMessageToDeadLetterQueueResponse()
        group, topic = request.group.name, request.topic.name
        try:
            key, qid, st, offset, lease = self._leased(group, topic, request.receipt_handle)
        except Refused as r:
            return self.f.status(response, r.code, str(r))
        if lease is not None:
            why = await self._dead_letter(key, qid, offset, group, topic, "the consumer sent it there")
            if why is not None:
                return self.f.status(response, "INTERNAL_SERVER_ERROR", why)
        return self.f.status(response)

    def _dead_letter_soon(self, key: bytes, qid: int, offset: int, group: str, topic: str, why: str) -> None:
        if (key, qid, offset) not in self.dead_lettering:
            asyncio.ensure_future(self._dead_letter(key, qid, offset, group, topic, why))

    async def _dead_letter(self, key: bytes, qid: int, offset: int, group: str, topic: str, why: str) -> str | None:
        """A copy of the leased message to ``%DLQ%<group>`` (as a 4.x send-back past its
        maxReconsumeTimes stores one), then acked -> None, else why not (the lease falls due
        again a little later, and is tried again)."""
        st = self.states[(key, qid)]
        lease = st.leases.get(offset)
        if lease is None:
            return None
        self.dead_lettering.add((key, qid, offset))
        lease.deadline_ms = leases.NEVER
        try:
            failed = await self._store_dead_letter(group, topic, qid, offset, lease.attempt)
        finally:
            self.dead_lettering.discard((key, qid, offset))
        if failed is not None:
            lease.deadline_ms = now_ms() + DLQ_RETRY_MS
            log.warning("%s queue %d offset %d of group %s was not stored in its dead-letter queue: %s", topic, qid,
                        offset, group, failed)
            return failed
        log.info("%s queue %d offset %d of group %s: to %s%s (%s, after %d deliveries)", topic, qid, offset, group,
                 DLQ_PREFIX, group, why, lease.attempt)
        self._acked(key, qid, st, offset)
        self.journal.write()
        return None

    async def _store_dead_letter(self, group: str, topic: str, qid: int, offset: int, attempts: int) -> str | None:
        stored = self._stored(topic, qid, offset)
        if stored is None:
            return None                                  # gone (retention): nothing to keep
        head, body, rtopic, props = stored
        target = DLQ_PREFIX + group
        link = self.f.link
        tidx = self.f.topics.lookup(target)
        if tidx is None:
            await link.auto_create_topic(topic_config(target, 1, 1, PERM_RW))
            tidx = self.f.topics.lookup(target)
            if tidx is None:
                return f"topic {target} could not be created"
        record = message.record_again(head, body, returned_properties(head, rtopic, props, 0), topic=target.encode(),
                                      queue_id=0, reconsume_times=max(head.reconsume_times, attempts - 1))
        return await link.put(tidx, 0, head.sys_flag, record)
