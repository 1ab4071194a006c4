"""CONSUMER_SEND_MSG_BACK (36): a consumer gives back a message it could not consume, and it is
stored again for a later try, in ``%RETRY%<group>`` after a delay level, or, past the group's
``maxReconsumeTimes`` (or when the consumer asks with a negative level), in ``%DLQ%<group>``,
where it is never retried again (FACTS §9.2, FACTS-wave2 §3;
broker:processor/SendMessageProcessor.java#asyncConsumerSendMsgBack).

The copy keeps the stored message's body, flag, sysflag, born time and hosts and properties; its
reconsume count is one more; ``RETRY_TOPIC`` (the topic it was first sent to) and
``ORIGIN_MESSAGE_ID`` (the first stored copy's offsetMsgId) are added when missing, ``WAIT`` is
false and ``DELAY`` is the level (0 for the DLQ).  A delayed copy goes to SCHEDULE_TOPIC_XXXX as
any delayed send does (``store/delay.py``), and the scheduler puts it into the retry topic when due.

A consumer's own fallback, a plain send to ``%RETRY%<group>`` when its send-back failed, is turned
into ``%DLQ%<group>`` by the send path (``dead_letter``) once its reconsume count reaches the limit.
"""
from __future__ import annotations

import random

from rocketbox.remoting import headers
from rocketbox.remoting.codes import FAQ
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.shm.layout import T
from rocketbox.store import delay, message
from rocketbox.store.groupconfig import DLQ_PREFIX, RETRY_PREFIX, returned_properties
from rocketbox.store.topicconfig import PERM_RW, PERM_WRITE, topic_config

VERSION_WITH_MAX = 121          # MQVersion V3_4_9: from it the header's maxReconsumeTimes counts


def max_reconsume_times(group_config: dict, header_max: int | None, version: int) -> int:
    """The group's retryMaxTimes, unless a client of 3.4.9 or later says otherwise."""
    if version >= VERSION_WITH_MAX and header_max is not None:
        return header_max
    return int(group_config.get("retryMaxTimes", 16))


class SendBackProcessor:
    def __init__(self, broker):
        self.b, self.cfg, self.link, self.view = broker, broker.cfg, broker.link, broker.view
        self.topics, self.ctl, self.loop = broker.topics, broker.sh.control, broker.loop
        self.max_level = len(self.cfg.delay_levels_ms)

    def handlers(self) -> dict:
        return {R.CONSUMER_SEND_MSG_BACK: self.send_back}

    async def send_back(self, cmd, _conn):
        h = headers.decode(cmd)
        group = h["group"]
        sg = self.b.group(group)
        if sg is None:
            return cmd.response(RC.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group} {FAQ}")
        if int(sg.get("retryQueueNums", 1)) <= 0:
            return cmd.response(RC.SUCCESS, None)                     # retries are off for it: dropped, as 4.9.8
        if self.cfg.slave:                                            # 4.9.8's put refused, by name
            return cmd.response(RC.SYSTEM_ERROR, "SERVICE_NOT_AVAILABLE")
        retry = RETRY_PREFIX + group
        tidx = await self._topic(retry, PERM_RW)
        if tidx is None or not self.topics.row(tidx)[T.PERM] & PERM_WRITE:
            return cmd.response(RC.NO_PERMISSION, f"the topic[{retry}] sending message is forbidden")
        stored = self._stored(h["offset"])
        if stored is None:
            return cmd.response(RC.SYSTEM_ERROR, f"look message by offset failed, {h['offset']}")
        head, body, topic, props = stored
        reconsume = head.reconsume_times
        level = h["delayLevel"]
        limit = max_reconsume_times(sg, h["maxReconsumeTimes"], cmd.version)
        if reconsume >= limit or level < 0:
            target, level = DLQ_PREFIX + group, 0
            tidx = await self._topic(target, PERM_RW)                 # 4.9.4+: readable (was write-only)
            if tidx is None:
                return cmd.response(RC.SYSTEM_ERROR, f"topic[{target}] not exist")
        else:
            target, level = retry, level or 3 + reconsume
        props = returned_properties(head, topic, props, level)
        qid = random.randrange(max(1, self.topics.row(tidx)[T.WRITE_QUEUE_NUMS]))     # (1 queue: 0)
        if level > 0:
            tidx = self.topics.lookup(delay.SCHEDULE_TOPIC)
            if tidx is None:
                return cmd.response(RC.SYSTEM_ERROR, f"{delay.SCHEDULE_TOPIC} is missing from the topic table")
            props = delay.scheduled_properties(props, level, self.max_level, target, qid)
            stored_topic, stored_qid = delay.SCHEDULE_TOPIC_BYTES, min(level, self.max_level) - 1
        else:
            stored_topic, stored_qid = target.encode(), qid
        record = message.record_again(head, body, props, topic=stored_topic, queue_id=stored_qid,
                                      reconsume_times=reconsume + 1)
        failed = await self.link.put(tidx, stored_qid, head.sys_flag, record)
        if failed is not None:
            return cmd.response(RC.SYSTEM_ERROR, failed)
        return cmd.response(RC.SUCCESS, None)

    async def _topic(self, name: str, perm: int) -> int | None:
        """The retry or dead-letter topic's index, made (1 queue) when missing."""
        tidx = self.topics.lookup(name)
        if tidx is None:
            await self.link.auto_create_topic(topic_config(name, 1, 1, perm))
            tidx = self.topics.lookup(name)
        return tidx

    def _stored(self, offset: int):
        """The consumed message at CommitLog ``offset`` -> (header fields, body, topic, properties),
        None when no stored message starts there (``StoreView.stored``: what any reader
        acknowledged, every reader finds)."""
        s = self.view.stored(offset)
        return None if s is None else (s.head, s.body, s.topic, s.props)
