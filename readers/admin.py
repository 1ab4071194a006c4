"""Administration (FACTS §3.8): VIEW_MESSAGE_BY_ID, CONSUME_MESSAGE_DIRECTLY,
UPDATE_AND_CREATE_TOPIC, GET_ALL_TOPIC_CONFIG, GET_BROKER_RUNTIME_INFO; and what admin tools read
(``mqadmin topicStatus`` / ``consumerProgress``, ``appliance topic-status`` / ``progress``):
GET_TOPIC_STATS_INFO and GET_CONSUME_STATS, as broker:processor/AdminBrokerProcessor.java builds them.
"""
from __future__ import annotations

import json
import os

from rocketbox.readers.offsets import offset_key
from rocketbox.readers.send import SYSTEM_TOPICS
from rocketbox.remoting import headers, mqtable
from rocketbox.remoting.codes import SERVER_VERSION, SERVER_VERSION_DESC
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.shm import disk, stats
from rocketbox.shm.layout import C, T
from rocketbox.store import delay, message, scheduled, topicjournal
from rocketbox.store.errors import StoreError
from rocketbox.store.groupconfig import subscription_group
from rocketbox.store.topicconfig import QueueNumsOutOfRange, check_queue_nums, topic_config

SYSTEM_TOPICS_FOR_ADMIN = SYSTEM_TOPICS | {"TBW102"}
# the thread pools' keys: nothing waits in a pool here (0), and RocketMQ's default capacities
_POOLS = {f"{pool}ThreadPoolQueue{what}": "0" for pool in ("send", "pull", "query") for what in ("Size", "HeadWaitTimeMills")}
_POOLS.update(sendThreadPoolQueueCapacity="10000", pullThreadPoolQueueCapacity="100000",
              queryThreadPoolQueueCapacity="20000")


class AdminProcessor:
    def __init__(self, broker):
        self.b, self.cfg, self.link, self.view = broker, broker.cfg, broker.link, broker.view
        self.topics, self.offsets, self.ctl = broker.topics, broker.offsets, broker.sh.control

    def handlers(self) -> dict:
        return {R.VIEW_MESSAGE_BY_ID: self.view_message, R.UPDATE_AND_CREATE_TOPIC: self.create_topic,
                R.GET_ALL_TOPIC_CONFIG: self.all_topics, R.GET_BROKER_RUNTIME_INFO: self.runtime_info,
                R.GET_TOPIC_STATS_INFO: self.topic_stats, R.GET_CONSUME_STATS: self.consume_stats,
                R.CONSUME_MESSAGE_DIRECTLY: self.consume_directly, R.VIEW_BROKER_STATS_DATA: self.broker_stats,
                R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_group}

    def _stored(self, phys: int) -> bytes:
        """The whole record at CommitLog offset ``phys``; ValueError naming the offset if none is."""
        if not int(self.ctl[C.MIN_PHYS]) <= phys < int(self.ctl[C.WRITTEN]):
            raise ValueError(f"can not find message by the offset, {phys}")
        try:
            rec = self.view.record(phys).tobytes()
            message.decode_record(rec)
        except (ValueError, StoreError) as e:
            raise ValueError(f"can not find message by the offset, {phys}: {e}") from None
        return rec

    def view_message(self, cmd, _conn):
        try:
            return cmd.response(body=self._stored(headers.decode(cmd)["offset"]))
        except ValueError as e:
            return cmd.response(RC.SYSTEM_ERROR, str(e))

    def consume_directly(self, cmd, _conn):
        """CONSUME_MESSAGE_DIRECTLY (309): the stored message ``msgId`` names, handed to one
        consumer of the group to consume now (a dashboard's "resend to this consumer"), with this
        broker's name; put to it as GET_CONSUMER_RUNNING_INFO is (``ClientProcessor.call_consumer``)."""
        h = headers.decode(cmd)
        try:
            body = self._stored(message.parse_offset_msg_id(h["msgId"] or "")[2])
        except ValueError as e:
            return cmd.response(RC.SYSTEM_ERROR, f"msgId {h['msgId']!r}: {e}")
        return self.b.clients.call_consumer(cmd, h["consumerGroup"], h["clientId"] or "", body,
                                            brokerName=self.cfg.brokerName)

    # ------------------------------------------------------------ topics
    def create_topic(self, cmd, _conn):
        h = headers.decode(cmd)
        topic = h["topic"]
        try:
            message.check_topic(topic)
        except message.MessageRejected as e:
            return cmd.response(RC.SYSTEM_ERROR, e.remark)
        if topic in SYSTEM_TOPICS_FOR_ADMIN or topic == self.cfg.brokerClusterName:
            return cmd.response(RC.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
        attrs = {"retentionMs": h["retentionMs"], "purgedBeforeMs": h["purgedBeforeMs"]}
        if any(v is not None and v < 0 for v in attrs.values()):
            return cmd.response(RC.SYSTEM_ERROR, "retentionMs and purgedBeforeMs must be 0 or more")
        if h["purgeQueueId"] is not None:              # a purge of one queue
            if attrs["purgedBeforeMs"] is None or not 0 <= h["purgeQueueId"] < max(h["readQueueNums"],
                                                                                   h["writeQueueNums"]):
                return cmd.response(RC.SYSTEM_ERROR, "purgeQueueId needs purgedBeforeMs and one of the topic's queues")
            attrs["purgedQueues"] = {str(h["purgeQueueId"]): attrs.pop("purgedBeforeMs")}
        tc = topic_config(topic, h["readQueueNums"], h["writeQueueNums"], h["perm"],
                          sys_flag=h["topicSysFlag"] or 0, order=bool(h["order"]),
                          filter_type=h["topicFilterType"] or "SINGLE_TAG", **attrs)
        try:
            check_queue_nums(tc, self.cfg.maxTopicQueueNums)
        except QueueNumsOutOfRange as e:
            return cmd.response(RC.SYSTEM_ERROR, str(e))
        return self._create(cmd, tc)

    # ------------------------------------------------------------ consumer groups
    def update_group(self, cmd, _conn):
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200, ``mqadmin updateSubGroup``): the body's
        SubscriptionGroupConfig over RocketMQ's defaults, to the writer (subscriptionGroup.json);
        kept as sent, 5.x's fields among them (``consumeMessageOrderly``: a FIFO group for the
        gRPC front's consumers)."""
        try:
            sg = json.loads(cmd.body or b"null")
            name = sg["groupName"]
            if not isinstance(name, str) or not name or not isinstance(sg.get("retryMaxTimes", 0), int):
                raise ValueError("groupName is not a name, or retryMaxTimes not a number")
        except (ValueError, TypeError, KeyError) as e:
            return cmd.response(RC.SYSTEM_ERROR, f"the body is not a SubscriptionGroupConfig: {e}")
        self.link.push_group({**subscription_group(name), **sg})
        return cmd.response()

    async def _create(self, cmd, tc):
        status = await self.link.create_topic(tc)
        if status != 0:
            return cmd.response(RC.SYSTEM_ERROR, self.link.creation_failed(tc["topicName"], status))
        return cmd.response()

    def all_topics(self, cmd, _conn):
        data = topicjournal.read(self.cfg.config_dir) or {}
        return cmd.response(body=json.dumps(data, sort_keys=True).encode())

    # ------------------------------------------------------------ what admin tools read
    def topic_stats(self, cmd, _conn):
        """TopicStatsTable: each write queue's min and max offset, and when its last message was
        stored (0 for an empty queue); TOPIC_NOT_EXIST for a topic the broker does not have."""
        topic = headers.decode(cmd)["topic"]
        _tidx, meta = self.topics.live(topic)
        if meta is None:
            return cmd.response(RC.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        table = {}
        for qid in range(meta[T.WRITE_QUEUE_NUMS]):
            lo, hi = self.view.offsets(topic, qid) or (0, 0)
            table[(topic, self.cfg.brokerName, qid)] = {
                "lastUpdateTimestamp": (self.view.stored_at(topic, qid, hi - 1) or 0) if hi > 0 else 0,
                "maxOffset": max(hi, 0), "minOffset": max(lo, 0)}
        return cmd.response(body=mqtable.encode({}, "offsetTable", table))

    def consume_stats(self, cmd, _conn):
        """ConsumeStats of a group on one topic, or on every topic it has committed offsets on:
        each read queue's max offset (brokerOffset), the group's committed offset (0 if none) and
        the store time of the last message it consumed; and consumeTps, the messages per second
        its pulls found on those queues over the last minute (``shm.stats``)."""
        h = headers.decode(cmd)
        group = h["consumerGroup"]
        topics = [h["topic"]] if h["topic"] else sorted(self.offsets.topics_of(group))
        table, counters = {}, []
        for topic in topics:
            _tidx, meta = self.topics.live(topic)
            if meta is None:
                continue
            key = offset_key(topic, group)
            counters += self._counters(key, meta)
            for qid in range(meta[T.READ_QUEUE_NUMS]):
                _lo, hi = self.view.offsets(topic, qid) or (0, 0)
                consumed = max(self.link.committed_offset(key, qid) or 0, 0)
                table[(topic, self.cfg.brokerName, qid)] = {
                    "brokerOffset": max(hi, 0), "consumerOffset": consumed,
                    "lastTimestamp": (self.view.stored_at(topic, qid, consumed - 1) or 0) if consumed > 0 else 0}
        return cmd.response(body=mqtable.encode({"consumeTps": self.b.rates.group_tps(counters)}, "offsetTable", table))

    def _counters(self, key: bytes, meta) -> list[int]:
        """The consumer offset slots of ``key`` (topic@group) on the topic's read queues: where its
        pulls' messages are counted (``shm.stats``); none on a queue it has not committed on."""
        return [s for qid in range(meta[T.READ_QUEUE_NUMS]) if (s := self.offsets.slot(key, qid)) is not None]

    def broker_stats(self, cmd, _conn):
        """VIEW_BROKER_STATS_DATA (315, what rocketmq-exporter reads for its TPS figures): one of
        BrokerStatsManager's counts over its minute, hour and day (``Rates.stats``), or 1 "The stats
        <name> <key> not exist" for a count this broker does not keep or a key it has not seen."""
        h = headers.decode(cmd)
        name, key = h["statsName"], h["statsKey"]
        count = self._stats_count(name, key)
        if count is None:
            return cmd.response(RC.SYSTEM_ERROR, f"The stats <{name}> <{key}> not exist")
        return cmd.response(body=json.dumps(self.b.rates.stats(count), sort_keys=True).encode())

    def _stats_count(self, name: str, key: str):
        """What a count of VIEW_BROKER_STATS_DATA reads from a sample (``shm.stats.Snap``): the
        broker's puts and gets (key: the cluster's name), a topic's puts and their bytes, the
        messages a group's pulls found on a topic (key: topic@group, once it has committed there);
        None for the others."""
        if name in ("BROKER_PUT_NUMS", "BROKER_GET_NUMS"):
            if key != self.cfg.brokerClusterName:
                return None
            return (lambda s: s.puts) if name == "BROKER_PUT_NUMS" else (lambda s: s.gets)
        if name in ("TOPIC_PUT_NUMS", "TOPIC_PUT_SIZE"):
            meta = self.topics.live(key)[1]
            if meta is None:
                return None
            queues = self.view.queues
            slots = [s for qid in range(max(meta[T.READ_QUEUE_NUMS], meta[T.WRITE_QUEUE_NUMS]))
                     if (s := queues.slot(key, qid)) is not None]
            if name == "TOPIC_PUT_NUMS":
                return lambda s: stats.since_start(s.queue_max, slots)
            return lambda s: stats.since_start(s.queue_bytes, slots)
        if name == "GROUP_GET_NUMS" and "@" in key:
            topic, group = key.split("@", 1)
            meta = self.topics.live(topic)[1]
            counters = [] if meta is None else self._counters(offset_key(topic, group), meta)
            if not counters:
                return None
            return lambda s: stats.since_start(s.group_pulls, counters)
        return None

    def _schedule_offsets(self) -> dict:
        """``scheduleMessageOffset_<level>`` = "<delivered up to>,<queue's max offset>" of each
        level in delayOffset.json (what rocketmq-exporter reads), and rocketbox's pending timers
        (``store/scheduled.py``: what the scheduler has written)."""
        p = scheduled.read(self.cfg.config_dir)
        out = {}
        for level, done in p.delivered.items():
            off = self.view.offsets(delay.SCHEDULE_TOPIC, level - 1)
            out[f"scheduleMessageOffset_{level}"] = f"{done},{off[1] if off else 0}"
        if p.timers_pending is not None:
            out["timerPending"], out["timerNextDueMs"] = str(p.timers_pending), str(p.timer_next_due_ms)
        return out

    def runtime_info(self, cmd, _conn):
        """KVTable of BrokerController.prepareRuntimeInfo's keys that this broker has: every one
        ``mqadmin clusterList`` reads and every one rocketmq-exporter parses strictly, in the real
        4.9.8 broker's formats (counts, rates, put latency and sizes: ``shm.stats``).  A send waits
        in no thread pool here (in its reader's slab, then the writer's ring: the put latency
        covers that), so the pools' queue sizes and waits are 0, and their capacities RocketMQ's
        defaults; pageCacheLockTimeMills is 0 (no lock is held across a put), as are
        dispatchMaxBuffer and startAcceptSendRequestTimeStamp (4.9.8's too), and
        remainTransientStoreBufferNumbs is Integer.MAX_VALUE (no transient store pool, as 4.9.8's
        default)."""
        ctl = self.ctl
        lo, hi = int(ctl[C.MIN_PHYS]), int(ctl[C.WRITTEN])
        earliest = self.view.record_ts(lo) if hi > lo else None
        total, free = disk.capacity(self.cfg.commitlog_dir)
        table = {
            "brokerVersion": str(SERVER_VERSION), "brokerVersionDesc": SERVER_VERSION_DESC,
            "commitLogMinOffset": str(lo), "commitLogMaxOffset": str(hi),
            "commitLogDiskRatio": repr(disk.used_ratio(self.cfg.commitlog_dir)),
            "consumeQueueDiskRatio": repr(disk.used_ratio(os.path.join(self.cfg.root, "consumequeue"))),
            "commitLogDirCapacity": f"Total : {disk.human_bytes(total)}, Free : {disk.human_bytes(free)}.",
            "earliestMessageTimeStamp": str(earliest if earliest is not None else -1),
            "dispatchBehindBytes": str(hi - int(ctl[C.DISPATCHED])), "dispatchMaxBuffer": "0",
            "remainHowManyDataToFlush": disk.human_bytes(max(0, hi - int(ctl[C.FLUSHED]))),
            "flushDiskType": self.cfg.flushDiskType, "brokerRole": self.cfg.brokerRole,
            "readerProcessNums": str(self.cfg.readerProcessNums),
            "startAcceptSendRequestTimeStamp": "0", "remainTransientStoreBufferNumbs": str(2**31 - 1),
            "pageCacheLockTimeMills": "0", **_POOLS, **self.b.rates.runtime(), **self._schedule_offsets(),
        }
        if not self.cfg.slave:                  # rocketbox's own: replication as the master sees it
            table.update({"haSlaveCount": str(int(ctl[C.SLAVE_COUNT])), "haPush2SlaveMaxOffset": str(int(ctl[C.SLAVE_ACKED])),
                          "haSlaveLagBytes": str(int(ctl[C.SLAVE_LAG_BYTES])), "haSlaveLagMs": str(int(ctl[C.SLAVE_LAG_MS]))})
        return cmd.response(body=json.dumps({"table": table}, sort_keys=True).encode())
