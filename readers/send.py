"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) and their oneway forms
(FACTS §3.1–3.2, broker:processor/SendMessageProcessor.java).

The checks RocketMQ makes before a store sees the message (topic name, system topics, unknown
topic and auto-create from ``defaultTopic``, queue id, batch rules) answer here with Java's codes.
A transactional half message (``TRAN_MSG=true``) is stored in RMQ_SYS_TRANS_HALF_TOPIC queue 0
(``store/transaction.py``), its reply naming the queue the producer chose and the half queue's
offset, as 4.9.8's; with ``rejectTransactionMessage=true`` it is refused NO_PERMISSION, alone or
in a batch.
The handler checks what needs no writer and returns ``DEFERRED``; a loop turn's sends (from every
connection) are then taken together: their stored records built and appended to the turn's slab
in one ``WriterLink.append``, with one waiter for all.  Each reply goes out when the writer's
answer is read: after the append (ASYNC_FLUSH) or after the flush (SYNC_FLUSH, FLUSH_DISK_TIMEOUT
after ``syncFlushTimeout``), with msgId (offsetMsgId; comma-joined for a batch), queueId and
queueOffset.  Only a send to an unknown topic takes a task (it waits for the writer to create the
topic first); the sends that come for that topic meanwhile wait with it, and are appended after it
in the order they came.
"""
from __future__ import annotations

import functools
import logging
import random
import time

from rocketbox.net.server import DEFERRED
from rocketbox.readers.sendback import max_reconsume_times
from rocketbox.remoting import codec, headers
from rocketbox.remoting.codes import FAQ
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.shm import protocol as P
from rocketbox.shm.disk import disk_remark
from rocketbox.shm.layout import C, T
from rocketbox.shm.ringclient import RingClient
from rocketbox.shm.tables import queue_nums_of
from rocketbox.shm.writerlink import REJECTED
from rocketbox.store import delay, message, timer, transaction
from rocketbox.store.errors import MessageRejected
from rocketbox.store.groupconfig import DLQ_PREFIX, RETRY_PREFIX
from rocketbox.store.topicconfig import PERM_INHERIT, PERM_WRITE, topic_config

SYSTEM_TOPICS = frozenset({"SCHEDULE_TOPIC_XXXX", timer.TIMER_TOPIC, transaction.HALF_TOPIC, transaction.OP_TOPIC,
                           transaction.CHECK_MAX_TOPIC, "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT"})
_SEP = message.PROPERTY_SEP
_SUCCESS, _BATCH = int(RC.SUCCESS), int(R.SEND_BATCH_MESSAGE)    # per send: an enum member's lookup costs 4x an int's
log = logging.getLogger("rocketbox.reader")


class SendProcessor:
    def __init__(self, broker):
        self.b, self.cfg, self.link = broker, broker.cfg, broker.link
        self.topics, self.ctl, self.loop, self.flushes = broker.topics, broker.sh.control, broker.loop, broker.flushes
        self.replicas = broker.replicas
        self.ring = self.link.ring
        self.cluster_prop = f"{_SEP}CLUSTER{message.NAME_VALUE_SEP}{self.cfg.brokerClusterName}"
        self.region = {"MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
        self.no_transactions = f"the broker[{self.cfg.brokerIP1}] sending transaction message is forbidden"
        self.stored_reply = codec.ResponseTemplate(("msgId", "queueId", "queueOffset"), self.region)
        self.msg_id = message.MsgIds(self.ring.store_ip, self.ring.store_port)
        self.sync_flush, self.flush_timeout_s = broker.sync_flush, broker.flush_timeout_s
        self.sync_master, self.slave_timeout_s = broker.sync_master, broker.slave_timeout_s
        self.slave_unavailable = broker.slave_unavailable
        self.max_level = len(self.cfg.delay_levels_ms)   # a DELAY past it is the last level
        self.max_timer_ms = self.cfg.timerMaxDelaySec * 1000
        self.topic_bytes: dict[str, bytes] = {}      # names that passed the checks, encoded
        self.turn: list[tuple] = []                  # this loop turn's sends: (cmd, conn, header, topic index, row)
        self.creating: dict[str, list[tuple]] = {}   # topic being auto-created -> its sends so far: (cmd, conn, header)
        self.creations: set = set()                  # (the tasks creating them)

    def handlers(self) -> dict:
        return {R.SEND_MESSAGE: self.send, R.SEND_MESSAGE_V2: self.send, R.SEND_BATCH_MESSAGE: self.send}

    def send(self, cmd, conn):
        """Checks that need no writer, then the request joins this loop turn's sends (``_turn``),
        which are encoded and appended together."""
        if self.cfg.slave:                        # a slave's store takes the master's bytes only
            return cmd.response(RC.SERVICE_NOT_AVAILABLE, disk_remark(self.ctl), ext=dict(self.region))
        h = headers.decode(cmd)
        topic = h["topic"]
        if topic.startswith(RETRY_PREFIX):
            try:
                topic = self._dead_letter(cmd, h)
            except MessageRejected as e:
                return self._refused(cmd, e)
        if topic not in self.topic_bytes:
            try:
                message.check_topic(topic)
                if topic in SYSTEM_TOPICS:
                    raise MessageRejected(RC.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden.")
            except MessageRejected as e:
                return self._refused(cmd, e)
            if len(self.topic_bytes) >= 4096:
                self.topic_bytes.clear()
            self.topic_bytes[topic] = topic.encode()
        waiting = self.creating.get(topic)
        if waiting is not None:                   # behind the sends that wait for its creation
            waiting.append((cmd, conn, h))
            return DEFERRED
        tidx, meta = self.topics.live(topic)
        if tidx is None:
            self.creating[topic] = [(cmd, conn, h)]
            task = self.loop.create_task(self._create_then_append(topic, h))
            self.creations.add(task)
            task.add_done_callback(self.creations.discard)
            return DEFERRED
        if not self.turn:
            self.loop.call_soon(self._turn)
        self.turn.append((cmd, conn, h, tidx, meta))
        return DEFERRED

    def _dead_letter(self, cmd, h) -> str:
        """A send to a group's retry topic (a consumer's fallback when its send-back failed) whose
        reconsume count has reached the group's limit goes to its dead-letter topic instead,
        queue 0, as 4.9.8's handleRetryAndDLQ, and is not delayed (its DELAY becomes 0: a
        message given up is kept at once) -> the topic it goes to."""
        topic = h["topic"]
        group = topic[len(RETRY_PREFIX):]
        sg = self.b.group(group)
        if sg is None:
            raise MessageRejected(RC.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group} {FAQ}")
        limit = max_reconsume_times(sg, h["maxReconsumeTimes"], cmd.version)
        if (h["reconsumeTimes"] or 0) < limit:
            return topic
        h["topic"], h["queueId"] = DLQ_PREFIX + group, 0
        if h["properties"] and "DELAY\x01" in h["properties"]:   # stored at once, as a send-back's DLQ copy (DELAY=0)
            h["properties"] = message.with_properties(h["properties"].encode("utf-8", "surrogateescape"),
                                              {b"DELAY": b"0"}).decode("utf-8", "surrogateescape")
        return h["topic"]

    async def _create_then_append(self, topic: str, h) -> None:
        """Create ``topic`` as its first send ``h`` asks, then append every send that came for
        it meanwhile, in arrival order, in one go: a send arriving after the writer made the
        topic, but before this task resumed, must not be stored ahead of the earlier ones (a
        producer's pipelined sends to one queue are stored in the order sent)."""
        try:
            tidx = await self._create_topic(topic, h)
        except Exception as e:
            for cmd, conn, _h in self.creating.pop(topic):
                conn.send_reply(cmd, self._refused(cmd, e) if isinstance(e, MessageRejected) else conn.failure(cmd, e))
            return
        meta = self.topics.row(tidx)
        self._append([(cmd, conn, hh, tidx, meta) for cmd, conn, hh in self.creating.pop(topic)])

    def _refused(self, cmd, e: MessageRejected):
        return cmd.response(e.code, e.remark, ext=dict(self.region))

    def _turn(self) -> None:
        turn, self.turn = self.turn, []
        self._append(turn)

    def _append(self, sends: list[tuple]) -> None:
        """Encode each send's records (a refusal answered at once) and append them all in one go;
        or, while the writer is stalled, refuse them all (flow control: the client tries again,
        elsewhere or later, instead of waiting out its time-out)."""
        if self.link.stalled():
            self._stored([(cmd, conn, False, 0) for cmd, conn, *_ in sends], 0, len(sends), None, None, REJECTED)
            return
        if self.ctl[C.DISK_FULL] or self.ctl[C.DISPATCH_NO_ROOM]:   # above diskSpaceWarningLevelRatio,
            # or the dispatcher cannot make a consume-queue file: nothing is acknowledged that consumers cannot see
            self._stored([(cmd, conn, False, 0) for cmd, conn, *_ in sends], 0, len(sends), None, None,
                         (RC.SERVICE_NOT_AVAILABLE, disk_remark(self.ctl)))
            return
        rows, sizes, parts, sent = [], [], [], []
        for cmd, conn, h, tidx, meta in sends:
            try:
                row, records, wait, qid = self._request(cmd, conn, h, tidx, meta)
            except MessageRejected as e:          # a check here or in store.message refused it
                conn.send_reply(cmd, self._refused(cmd, e))
                continue
            except Exception as e:
                conn.send_reply(cmd, conn.failure(cmd, e))
                continue
            rows.append(row)
            sizes += records.sizes
            parts += records.parts
            sent.append((cmd, conn, wait, qid))
        if not rows:
            return
        try:
            self.link.append(rows, sizes, parts, functools.partial(self._stored, sent))
        except Exception as e:              # a bug: answered now rather than left to time out
            log.exception("appending a loop turn's %d sends failed", len(sent))
            self._stored(sent, 0, len(sent), None, None, (RC.SYSTEM_ERROR, f"{type(e).__name__}: {e}"[:500]))

    def _stored(self, sent: list[tuple], first: int, n: int, results: list | None, phys: list | None,
                failure: tuple[int, str] | None) -> None:
        """The writer's answer to ``sent[first:first + n]`` (a WriterLink waiter)."""
        if results is None or phys is None:
            assert failure is not None                   # (the link gives a failure with no results)
            code, remark = failure
            for cmd, conn, *_ in sent[first:first + n]:
                conn.send_reply(cmd, cmd.response(code, remark, ext=dict(self.region)))
            return
        j, flush_waits, last_end = 0, [], -1
        at = P.RESULT_AT
        for (cmd, conn, wait, qid), r in zip(sent[first:first + n], results):     # qid: the queue the producer named
            status, qoff, count = r[at.status], r[at.queue_offset], r[at.count]
            if status == P.QUEUES_FULL:
                conn.send_reply(cmd, cmd.response(RC.SYSTEM_ERROR, f"the broker's queue table is full "
                                                  f"({self.cfg.shmQueueSlots} queues, shmQueueSlots): a queue not "
                                                  "written before cannot take messages", ext=dict(self.region)))
            elif status != P.SUCCESS:
                conn.send_reply(cmd, cmd.response(status, f"put failed with status {status}", ext=dict(self.region)))
            elif wait:
                flush_waits.append((cmd, conn, qid, qoff, phys[j:j + count]))
                last_end = r[at.end_offset]
            elif not cmd.is_oneway:
                conn.write(self._reply(cmd, qid, qoff, phys[j] if count == 1 else phys[j:j + count]))
            j += count
        if not flush_waits:
            return
        if self.sync_flush:
            self.flushes.after(last_end, self.flush_timeout_s, functools.partial(self._flushed, flush_waits, last_end))
        else:
            self._flushed(flush_waits, last_end, True)

    def _flushed(self, waits: list[tuple], end: int, flushed: bool) -> None:
        """SYNC_FLUSH: the CommitLog is on disk through ``end``, the last of ``waits`` (or the time
        is up); then SYNC_MASTER's wait for a slave to have it, as 4.9.8: none connected, or the
        one furthest on more than ``haSlaveFallbehindMax`` behind, is SLAVE_NOT_AVAILABLE at once."""
        code = _SUCCESS if flushed else int(RC.FLUSH_DISK_TIMEOUT)
        if self.sync_master:
            if self.slave_unavailable(end):
                code = int(RC.SLAVE_NOT_AVAILABLE)
            else:
                self.replicas.after(end, self.slave_timeout_s, functools.partial(self._replicated, waits, code))
                return
        self._answer(waits, code)

    def _replicated(self, waits: list[tuple], code: int, replicated: bool) -> None:
        """SYNC_MASTER: a slave has the last of ``waits`` (or the time is up: its status overrides the flush's)."""
        self._answer(waits, code if replicated else int(RC.FLUSH_SLAVE_TIMEOUT))

    def _answer(self, waits: list[tuple], code: int) -> None:
        for cmd, conn, qid, qoff, phys in waits:
            if not cmd.is_oneway:
                conn.write(self._reply(cmd, qid, qoff, phys[0] if len(phys) == 1 else phys, code))

    def _reply(self, cmd, qid: int, qoff: int, phys, code: int = _SUCCESS) -> bytes:
        """The frame of a stored send: ``phys`` is the record's offset, or a batch's list of them.
        Its values (hex, commas, digits) are formatted straight to bytes unless a remark goes too
        (a stored send not SEND_OK: the status's name)."""
        ids = self.msg_id.ascii_of(phys) if type(phys) is int else self.msg_id.join(phys).encode()
        if code == _SUCCESS:
            return self.stored_reply.encode_ascii(cmd, _SUCCESS, (ids, b"%d" % qid, b"%d" % qoff))
        return self.stored_reply.encode(cmd, code, RC(code).name, (ids.decode(), str(qid), str(qoff)))

    def _request(self, cmd, conn, h, tidx: int, meta: list[int]) -> tuple[tuple, message.Records, bool, int]:
        """-> (the P.REQUEST row, the stored records, whether the producer waits for the flush,
        the queue id its reply names); ``meta``: the topic's row, as read when the send arrived
        this loop turn.  A delayed message goes to SCHEDULE_TOPIC_XXXX (``_scheduled``), and its
        reply names the queue the producer chose, as 4.9.8's does."""
        topic = h["topic"]
        if not meta[T.PERM] & PERM_WRITE:
            raise MessageRejected(RC.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        qid = h["queueId"]
        if qid < 0:
            qid = random.randrange(max(1, meta[T.WRITE_QUEUE_NUMS]))
        if qid >= queue_nums_of(meta):
            raise MessageRejected(RC.SYSTEM_ERROR, f"request queueId[{qid}] is illegal, topic {topic} "
                                                   f"Producer: {conn.peer}")
        props = (h["properties"] or "").rstrip(_SEP)
        pbytes = (props + self.cluster_prop if props else self.cluster_prop[1:]).encode()
        # the producer waits for the flush (SYNC_FLUSH) unless its WAIT is not "true" (Java's
        # Message.isWaitStoreMsgOK: absent is true, else Boolean.parseBoolean)
        wait = (self.sync_flush or self.sync_master) and (message.property_value(pbytes, b"WAIT") or b"true").lower() == b"true"
        batch = h["batch"] or cmd.code == _BATCH
        half = transaction.is_half(pbytes)
        if self.cfg.rejectTransactionMessage and (half or batch and b"TRAN_MSG\x01" in cmd.body and any(
                map(transaction.is_half, message.batch_properties(cmd.body)))):      # a half message inside a batch
            raise MessageRejected(RC.NO_PERMISSION, self.no_transactions)
        sys_flag, tb = h["sysFlag"], self.topic_bytes.get(topic) or topic.encode()
        born_host, born_ts = conn.peer_addr, h["bornTimestamp"] or int(time.time() * 1000)
        if batch:
            if message.property_value(pbytes, b"DELAY") is not None:
                raise MessageRejected(RC.MESSAGE_ILLEGAL, "batch message does not support delay message")
            if any(message.property_value(pbytes, name) is not None for name in timer.ASKS):
                raise MessageRejected(RC.MESSAGE_ILLEGAL, "batch message does not support timer message")
            if sys_flag & message.TX_MASK:
                raise MessageRejected(RC.MESSAGE_ILLEGAL, "batch message does not support transaction message")
            records = self.ring.batch_records(tb, qid, sys_flag, cmd.body, pbytes, born_ts, born_host,
                                              h["reconsumeTimes"] or 0)
            stored_qid = qid
        else:
            if len(pbytes) > message.PROPERTIES_MAX_LEN:           # before the DELAY is read, as 4.9.8's checkMessage
                raise MessageRejected(RC.MESSAGE_ILLEGAL, f"message properties length too long {len(pbytes)} > "
                                                          f"{message.PROPERTIES_MAX_LEN}")
            if half and not batch:
                tidx, tb, stored_qid = self._system_topic(transaction.HALF_TOPIC), transaction.HALF_TOPIC_BYTES, 0
                pbytes, sys_flag = transaction.half_properties(pbytes, topic, qid), sys_flag & ~message.TX_MASK
            else:
                tidx, tb, stored_qid, pbytes = self._scheduled(tidx, tb, topic, qid, sys_flag, pbytes)
            records = self.ring.record(tb, stored_qid, sys_flag, cmd.body, pbytes, h["flag"], born_ts, born_host,
                                       h["reconsumeTimes"] or 0)
        return RingClient.row(tidx, stored_qid, sys_flag, born_host, len(records.sizes), wait), records, wait, qid

    def _scheduled(self, tidx: int, tb: bytes, topic: str, qid: int, sys_flag: int, pbytes: bytes):
        """Where a message is stored: as sent; or, with a DELAY level > 0, in SCHEDULE_TOPIC_XXXX
        queue level-1 (FACTS §9.1); or, with a timer due later than now, in the timer queue
        (``store/timer.py``); a delayed one with its real topic and queue in its properties.
        A transaction's half or rollback is stored as sent.  -> (topic index, topic bytes, queue
        id, properties)."""
        if b"DELAY\x01" not in pbytes and b"TIMER_" not in pbytes:
            return tidx, tb, qid, pbytes
        tx = sys_flag & message.TX_MASK
        if tx == message.TX_PREPARED or tx == message.TX_ROLLBACK:
            return tidx, tb, qid, pbytes
        try:
            level = delay.level_of(message.property_value(pbytes, delay.DELAY))
        except ValueError as e:
            raise MessageRejected(RC.SYSTEM_ERROR, str(e)) from None       # Java's parseInt throws: 1
        if level > 0:
            if b"TIMER_" in pbytes:
                pbytes = timer.without_timer(pbytes)                      # the level wins, as in 5.x
            props = delay.scheduled_properties(pbytes, level, self.max_level, topic, qid)
            return self._system_topic(delay.SCHEDULE_TOPIC), delay.SCHEDULE_TOPIC_BYTES, \
                min(level, self.max_level) - 1, props
        now = int(time.time() * 1000)
        try:
            when = timer.deliver_ms(pbytes, now, self.max_timer_ms)
        except ValueError as e:
            raise MessageRejected(RC.MESSAGE_ILLEGAL, str(e)) from None
        if when is None or when <= now:
            return tidx, tb, qid, pbytes                                  # due already: stored as sent
        return self._system_topic(timer.TIMER_TOPIC), timer.TIMER_TOPIC_BYTES, 0, \
            timer.timer_properties(pbytes, when, topic, qid)

    def _system_topic(self, name: str) -> int:
        tidx = self.topics.lookup(name)
        if tidx is None:
            raise MessageRejected(RC.SYSTEM_ERROR, f"{name} is missing from the topic table")
        return tidx

    async def _create_topic(self, topic: str, h) -> int:
        """Auto-create an unknown topic as RocketMQ does (FACTS §3.1); its table index."""
        if topic.startswith((RETRY_PREFIX, DLQ_PREFIX)):
            tc = topic_config(topic, 1, 1)                  # a group's retry or dead-letter topic: 1 queue, RW
        else:
            default = self.topics.lookup(h["defaultTopic"] or "")
            meta = self.topics.row(default) if default is not None else None
            if meta is None or not meta[T.PERM] & PERM_INHERIT or not self.cfg.autoCreateTopicEnable:
                raise MessageRejected(RC.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!{FAQ}")
            nums = max(1, min(h["defaultTopicQueueNums"], meta[T.WRITE_QUEUE_NUMS]))
            tc = topic_config(topic, nums, nums, meta[T.PERM] & ~PERM_INHERIT)
        status = await self.link.auto_create_topic(tc)
        tidx = self.topics.lookup(topic)
        if status != P.SUCCESS or tidx is None:
            raise MessageRejected(RC.SYSTEM_ERROR, self.link.creation_failed(topic, status))
        return tidx
