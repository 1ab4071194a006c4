"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) and their oneway forms
(FACTS §3.1–3.2, broker:processor/SendMessageProcessor.java).

The checks RocketMQ makes before a store sees the message (topic name, system topics, unknown
topic and auto-create from ``defaultTopic``, queue id, batch rules) answer here with Java's codes;
the message then goes through the reader's WriterLink as part of this loop turn's slab.  The reply
comes after the append (ASYNC_FLUSH) or after the flush (SYNC_FLUSH, FLUSH_DISK_TIMEOUT after
``syncFlushTimeout``), with msgId (offsetMsgId; comma-joined for a batch), queueId and queueOffset.
"""
from __future__ import annotations

import random

from remoting import headers
from remoting.codes import RequestCode as R, ResponseCode as RC
from shm.layout import T
from store import message
from store.errors import MessageRejected
from writer import protocol as P
from writer.client import PutRequest
from writer.topics import PERM_INHERIT, PERM_WRITE, topic_config

FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."
SYSTEM_TOPICS = frozenset({"SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                           "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT"})
RETRY_PREFIX = "%RETRY%"


class SendProcessor:
    def __init__(self, broker):
        self.b, self.cfg, self.link = broker, broker.cfg, broker.link
        self.store_ip, self.store_port = self.link.ring.store_ip, self.link.ring.store_port
        self.cluster_prop = f"{message.PROPERTY_SEP}CLUSTER{message.NAME_VALUE_SEP}{self.cfg.brokerClusterName}"
        self.region = {"MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}

    def handlers(self) -> dict:
        return {R.SEND_MESSAGE: self.send, R.SEND_MESSAGE_V2: self.send, R.SEND_BATCH_MESSAGE: self.send}

    def send(self, cmd, conn):
        return self._send(cmd, conn, headers.decode(cmd.code, cmd.ext))

    async def _send(self, cmd, conn, h):
        try:
            req = await self._request(cmd, conn, h)
        except MessageRejected as e:          # a check here or in store.message refused it
            return cmd.response(e.code, e.remark, ext=dict(self.region))
        res = await self.link.put(req)
        if not res.ok:
            return cmd.response(res.status, res.remark or f"put failed with status {res.status}", ext=dict(self.region))
        code = RC.SUCCESS
        if self.cfg.sync_flush and req.wait:
            if not await self.link.flushed(res.end_offset, self.cfg.syncFlushTimeout / 1000):
                code = RC.FLUSH_DISK_TIMEOUT
        ids = ",".join(message.offset_msg_id(self.store_ip, self.store_port, p) for p in res.phys_offsets)
        ext = {"msgId": ids, "queueId": str(res.queue_id), "queueOffset": str(res.queue_offset), **self.region}
        return cmd.response(code, None if code == RC.SUCCESS else "FLUSH_DISK_TIMEOUT", ext=ext)

    async def _request(self, cmd, conn, h) -> PutRequest:
        topic = h["topic"]
        message.check_topic(topic)
        if topic in SYSTEM_TOPICS:
            raise MessageRejected(RC.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden.")
        tidx = self.link.topics.lookup(topic)
        if tidx is None:
            tidx = await self._create_topic(topic, h)
        meta = self.link.topics.meta[tidx]
        write_nums = int(meta[T.WRITE_QUEUE_NUMS])
        if not int(meta[T.PERM]) & PERM_WRITE:
            raise MessageRejected(RC.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        qid = h["queueId"]
        if qid < 0:
            qid = random.randrange(max(1, write_nums))
        if qid >= self.link.topics.queue_nums(tidx):
            raise MessageRejected(RC.SYSTEM_ERROR, f"request queueId[{qid}] is illegal, topic {topic} "
                                           f"Producer: {conn.peer}")
        props = (h["properties"] or "").rstrip(message.PROPERTY_SEP)
        parsed = message.parse_properties(props) if props else {}
        wait = parsed.get("WAIT", "true") != "false"
        batch_props = props + self.cluster_prop if props else self.cluster_prop[1:]
        sys_flag = h["sysFlag"]
        if h["batch"] or cmd.code == R.SEND_BATCH_MESSAGE:
            if "DELAY" in parsed:
                raise MessageRejected(RC.MESSAGE_ILLEGAL, "batch message does not support delay message")
            if sys_flag & message.TX_MASK:
                raise MessageRejected(RC.MESSAGE_ILLEGAL, "batch message does not support transaction message")
            inner = message.decode_client_batch(cmd.body)
            bodies = [b for _f, b, _p in inner]
            flags = [f for f, _b, _p in inner]
            properties = [(p.rstrip(message.PROPERTY_SEP) + message.PROPERTY_SEP if p else "") + batch_props
                          for _f, _b, p in inner]
        else:
            bodies, flags, properties = [cmd.body], h["flag"], [batch_props]
        return PutRequest(topic, qid, bodies, properties, flag=flags, sys_flag=sys_flag,
                          born_ts=h["bornTimestamp"], born_host=conn.peer_addr,
                          reconsume_times=h["reconsumeTimes"] or 0, wait=wait)

    async def _create_topic(self, topic: str, h) -> int:
        """Auto-create an unknown topic as RocketMQ does (FACTS §3.1); its table index."""
        if topic.startswith(RETRY_PREFIX):
            tc = topic_config(topic, 1, 1)
        else:
            default = self.link.topics.lookup(h["defaultTopic"] or "")
            meta = self.link.topics.meta[default] if default is not None else None
            if meta is None or not int(meta[T.PERM]) & PERM_INHERIT or not self.cfg.autoCreateTopicEnable:
                raise MessageRejected(RC.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!{FAQ}")
            nums = max(1, min(h["defaultTopicQueueNums"], int(meta[T.WRITE_QUEUE_NUMS])))
            tc = topic_config(topic, nums, nums, int(meta[T.PERM]) & ~PERM_INHERIT)
        status = await self.link.create_topic(tc)
        tidx = self.link.topics.lookup(topic)
        if status != P.SUCCESS or tidx is None:
            raise MessageRejected(RC.SYSTEM_ERROR, f"create topic[{topic}] failed (writer status {status})")
        return tidx
