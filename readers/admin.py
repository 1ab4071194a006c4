"""Offsets and administration (FACTS §3.5, §3.8): QUERY/UPDATE_CONSUMER_OFFSET, GET_MAX/MIN_OFFSET,
GET_EARLIEST_MSG_STORETIME, SEARCH_OFFSET_BY_TIMESTAMP, VIEW_MESSAGE_BY_ID,
UPDATE_AND_CREATE_TOPIC, GET_ALL_TOPIC_CONFIG, GET_BROKER_RUNTIME_INFO; and what admin tools read
(``mqadmin topicStatus`` / ``consumerProgress``, ``appliance topic-status`` / ``progress``):
GET_TOPIC_STATS_INFO and GET_CONSUME_STATS, as broker:processor/AdminBrokerProcessor.java builds them.
"""
from __future__ import annotations

import json
import os
import struct

from rocketbox.readers.clients import NOT_ONLINE
from rocketbox.readers.send import SYSTEM_TOPICS
from rocketbox.remoting import headers, mqtable
from rocketbox.remoting.codec import Command
from rocketbox.remoting.codes import SERVER_VERSION, SERVER_VERSION_DESC, V3_0_7_SNAPSHOT
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.remoting.headers import HeaderError
from rocketbox.shm.layout import C, T
from rocketbox.store import configfile, delay, groupconfig, message, topicjournal
from rocketbox.store.errors import StoreError
from rocketbox.store.topicconfig import QueueNumsOutOfRange, check_queue_nums, topic_config

SYSTEM_TOPICS_FOR_ADMIN = SYSTEM_TOPICS | {"TBW102"}


def offset_key(topic: str, group: str) -> bytes:
    """``store.groupconfig.offset_key``; a topic and group too long for the offset table are refused
    as header values (SYSTEM_ERROR naming the limit), not as a failure of the reader."""
    try:
        return groupconfig.offset_key(topic, group)
    except ValueError as e:
        raise HeaderError(str(e)) from None


class AdminProcessor:
    def __init__(self, broker):
        self.b, self.cfg, self.link, self.view = broker, broker.cfg, broker.link, broker.view
        self.topics, self.offsets, self.ctl = broker.topics, broker.offsets, broker.sh.control

    def handlers(self) -> dict:
        return {R.QUERY_CONSUMER_OFFSET: self.query_offset, R.UPDATE_CONSUMER_OFFSET: self.update_offset,
                R.GET_MAX_OFFSET: self.max_offset, R.GET_MIN_OFFSET: self.min_offset,
                R.GET_EARLIEST_MSG_STORETIME: self.earliest_time, R.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset,
                R.VIEW_MESSAGE_BY_ID: self.view_message, R.UPDATE_AND_CREATE_TOPIC: self.create_topic,
                R.GET_ALL_TOPIC_CONFIG: self.all_topics, R.GET_BROKER_RUNTIME_INFO: self.runtime_info,
                R.GET_TOPIC_STATS_INFO: self.topic_stats, R.GET_CONSUME_STATS: self.consume_stats,
                R.CONSUME_MESSAGE_DIRECTLY: self.consume_directly, R.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset}

    # ------------------------------------------------------------ consumer offsets
    def query_offset(self, cmd, _conn):
        """A group's committed offset; for a group with none, 0 while the queue still starts at 0
        and its first message is in memory, else QUERY_NOT_FOUND (the client then starts where its
        consumeFromWhere says: a new group on a long queue does not read it all from the start)."""
        h = headers.decode(cmd)
        topic, qid = h["topic"], h["queueId"]
        off = self.link.committed_offset(offset_key(topic, h["consumerGroup"]), qid)
        if off is None or off < 0:
            lo = self.view.offsets(topic, qid)
            if lo is None or (lo[0] <= 0 and not self._on_disk(topic, qid, 0)):
                off = 0
            else:
                return cmd.response(RC.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")
        return cmd.response(ext={"offset": str(off)})

    def _on_disk(self, topic: str, qid: int, offset: int) -> bool:
        """The queue's message at ``offset`` is ``on_disk`` (DefaultMessageStore's
        checkInDiskByConsumeOffset); False when it has no message there."""
        e = self.view.entries(topic, qid, offset, 1)
        return bool(len(e)) and self.view.on_disk(int(e["phys"][0]))

    def update_offset(self, cmd, _conn):
        h = headers.decode(cmd)
        key, qid = offset_key(h["topic"], h["consumerGroup"]), h["queueId"]
        if not self.link.commit_offset(key, qid, h["commitOffset"]):
            return None if cmd.is_oneway else self._table_full(cmd)
        return None if cmd.is_oneway else self._applied(cmd, key, qid)

    def _table_full(self, cmd):
        return cmd.response(RC.SYSTEM_ERROR, f"the broker's consumer offset table is full ({self.cfg.shmOffsetSlots} "
                                             "offsets, shmOffsetSlots): this offset is not kept")

    async def _applied(self, cmd, key: bytes, qid: int):
        """Answer once the writer has the offset, so the next query through any reader sees it.
        A new (topic@group, queue) that passed the room check may still find the table full when
        the writer gets to it (commits from other connections and readers took the last slots
        meanwhile): the writer drops it, and the answer says so rather than SUCCESS."""
        if not await self.link.offsets_applied():
            return cmd.response(RC.SYSTEM_ERROR, "consumer offset not applied within 3 s")
        if self.link.offsets.get(key, qid) is None:
            return self._table_full(cmd)
        return cmd.response()

    def reset_offset(self, cmd, _conn):
        """INVOKE_BROKER_TO_RESET_OFFSET (222, ``mqadmin resetOffsetByTime``), as Java's
        Broker2Client.resetOffset: for each write queue, the offset of the message stored at
        ``timestamp`` (the queue's max offset for -1, "now"), taken if ``isForce`` or if it is
        before the group's committed offset (else the committed one stays).  The table goes to
        every member of the group (RESET_CONSUMER_CLIENT_OFFSET, oneway, on whichever reader it
        is: ``ClientProcessor.tell_group``), and each member starts its queues over from it and
        commits it; the broker moves no committed offset itself.  A group with no member online:
        CONSUMER_NOT_ONLINE (``mqadmin`` then commits the offsets itself, ``Admin.reset_offsets``).
        An admin that speaks CPP (``mqadmin -c``) has the members sent the C++ client's form."""
        h = headers.decode(cmd)
        topic, group, when = h["topic"], h["group"], h["timestamp"]
        _tidx, meta = self.topics.live(topic)
        if meta is None:
            return cmd.response(RC.SYSTEM_ERROR, f"[reset-offset] reset offset failed, no topic in this broker. "
                                                 f"topic={topic}")
        key, table = offset_key(topic, group), {}
        for qid in range(meta[T.WRITE_QUEUE_NUMS]):
            committed = self.link.committed_offset(key, qid)
            if committed is None or committed < 0:
                return cmd.response(RC.SYSTEM_ERROR, f"THe consumer group <{group}> not exist")
            bounds = self.view.offsets(topic, qid) or (0, 0)
            at = max(bounds[1] if when == -1 else self._offset_at(topic, qid, when, bounds), 0)
            table[(topic, self.cfg.brokerName, qid)] = at if h["isForce"] or at < committed else committed
        if cmd.language == "CPP":             # ResetOffsetBodyForC
            body = json.dumps({"offsetTable": [{"brokerName": b, "offset": o, "queueId": q, "topic": t}
                                               for (t, b, q), o in sorted(table.items())]},
                              separators=(",", ":")).encode()
        else:
            body = mqtable.encode({}, "offsetTable", table)
        req = Command(R.RESET_CONSUMER_CLIENT_OFFSET, {"topic": topic, "group": group, "timestamp": str(when),
                                                       "isForce": "false"}, body, language="JAVA")
        return self._reset(cmd, group, topic, req, mqtable.encode({}, "offsetTable", table))

    async def _reset(self, cmd, group: str, topic: str, req: Command, answer: bytes):
        failed = await self.b.clients.tell_group(group, req, V3_0_7_SNAPSHOT)
        if failed is NOT_ONLINE:
            return cmd.response(RC.CONSUMER_NOT_ONLINE, f"Consumer not online, so can not reset offset, Group: {group} "
                                                        f"Topic: {topic} Timestamp: {req.ext['timestamp']}")
        if failed:
            return cmd.response(RC.SYSTEM_ERROR, failed)
        return cmd.response(body=answer)

    # ------------------------------------------------------------ queue offsets and times
    def _bounds(self, cmd):
        h = headers.decode(cmd)
        return h, self.view.offsets(h["topic"], h["queueId"]) or (0, 0)

    def max_offset(self, cmd, _conn):
        _h, (_lo, hi) = self._bounds(cmd)
        return cmd.response(ext={"offset": str(hi)})

    def min_offset(self, cmd, _conn):
        _h, (lo, _hi) = self._bounds(cmd)
        return cmd.response(ext={"offset": str(lo)})

    def _store_ts(self, topic: str, qid: int, offset: int) -> int | None:
        e = self.view.entries(topic, qid, offset, 1)
        return self._record_ts(int(e["phys"][0]), int(e["size"][0])) if len(e) else None

    def _record_ts(self, phys: int, size: int | None = None) -> int | None:
        """The store time of the CommitLog's record at ``phys``; None if there is none there."""
        try:
            rec = self.view.record(phys, size)
        except ValueError:
            return None
        sys_flag = struct.unpack_from(">i", rec, message.SYSFLAG_AT)[0]
        return struct.unpack_from(">q", rec, message.store_ts_at(sys_flag))[0]

    def earliest_time(self, cmd, _conn):
        h, (lo, hi) = self._bounds(cmd)
        ts = self._store_ts(h["topic"], h["queueId"], lo) if hi > lo else None
        return cmd.response(ext={"timestamp": str(ts if ts is not None else -1)})

    def search_offset(self, cmd, _conn):
        h, bounds = self._bounds(cmd)
        return cmd.response(ext={"offset": str(self._offset_at(h["topic"], h["queueId"], h["timestamp"], bounds))})

    def _offset_at(self, topic: str, qid: int, want: int, bounds: tuple[int, int]) -> int:
        """The queue offset of the message stored nearest to ``want`` (ms), as RocketMQ 4.x's
        ``ConsumeQueue.getOffsetInQueueByTime``: one stored at that very ms if any, else the
        closer of its two neighbours in time (the earlier on a tie), the first message before
        them all and the last after them all; 0 for an empty queue.  Found by bisection over the
        records' store times between the queue's ``bounds`` (min, max)."""
        lo, hi = bounds
        a, b = lo, hi
        while a < b:                                  # a: the first offset stored at or after want
            mid = (a + b) // 2
            ts = self._store_ts(topic, qid, mid)
            if ts is None or ts >= want:
                b = mid
            else:
                a = mid + 1
        if a > lo:                                    # an earlier neighbour: nearer, or as near?
            before = self._store_ts(topic, qid, a - 1)
            after = self._store_ts(topic, qid, a) if a < hi else None
            if before is not None and (after is None or (after != want and want - before <= after - want)):
                a -= 1
        return a

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
                "lastUpdateTimestamp": (self._store_ts(topic, qid, hi - 1) or 0) if hi > 0 else 0,
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
            for qid in range(meta[T.READ_QUEUE_NUMS]):
                if (counter := self.offsets.slot(key, qid)) is not None:
                    counters.append(counter)
                _lo, hi = self.view.offsets(topic, qid) or (0, 0)
                consumed = max(self.link.committed_offset(key, qid) or 0, 0)
                table[(topic, self.cfg.brokerName, qid)] = {
                    "brokerOffset": max(hi, 0), "consumerOffset": consumed,
                    "lastTimestamp": (self._store_ts(topic, qid, consumed - 1) or 0) if consumed > 0 else 0}
        return cmd.response(body=mqtable.encode({"consumeTps": self.b.rates.group_tps(counters)}, "offsetTable", table))

    def _schedule_offsets(self) -> dict:
        """``scheduleMessageOffset_<level>`` = "<delivered up to>,<queue's max offset>" of each
        level in delayOffset.json (what rocketmq-exporter reads; the scheduler writes the file)."""
        try:
            table = (configfile.read(os.path.join(self.cfg.config_dir, "delayOffset.json")) or {}).get("offsetTable") or {}
        except Exception:
            return {}
        out = {}
        for level, done in table.items():
            off = self.view.offsets(delay.SCHEDULE_TOPIC, int(level) - 1)
            out[f"scheduleMessageOffset_{level}"] = f"{done},{off[1] if off else 0}"
        try:                          # the pending timers (rocketbox's keys; the scheduler's checkpoint)
            cp = configfile.read(os.path.join(self.cfg.config_dir, "timerCheckpoint.json")) or {}
        except Exception:
            cp = {}
        if cp:
            out["timerPending"], out["timerNextDueMs"] = str(cp.get("pending", 0)), str(cp.get("nextDueMs", 0))
        return out

    def runtime_info(self, cmd, _conn):
        """KVTable of BrokerController.prepareRuntimeInfo's keys that this broker has, among them
        every one ``mqadmin clusterList`` reads (counts and rates: ``shm.stats``).  A send waits
        in no thread pool here (in its reader's slab, then the writer's ring), so the pools'
        queue sizes and waits are 0, as is pageCacheLockTimeMills (no lock is held across a put)."""
        ctl = self.ctl
        lo, hi = int(ctl[C.MIN_PHYS]), int(ctl[C.WRITTEN])
        earliest = self._record_ts(lo) if hi > lo else None
        fs = os.statvfs(self.cfg.commitlog_dir)
        table = {
            "brokerVersion": str(SERVER_VERSION), "brokerVersionDesc": SERVER_VERSION_DESC,
            "commitLogMinOffset": str(lo), "commitLogMaxOffset": str(hi),
            "commitLogDiskRatio": repr((fs.f_blocks - fs.f_bfree) / fs.f_blocks if fs.f_blocks else 0.0),
            "earliestMessageTimeStamp": str(earliest if earliest is not None else -1),
            "dispatchBehindBytes": str(hi - int(ctl[C.DISPATCHED])),
            "remainHowManyDataToFlush": str(hi - int(ctl[C.FLUSHED])),
            "flushDiskType": self.cfg.flushDiskType, "brokerRole": self.cfg.brokerRole,
            "readerProcessNums": str(self.cfg.readerProcessNums),
            "sendThreadPoolQueueSize": "0", "sendThreadPoolQueueHeadWaitTimeMills": "0",
            "pullThreadPoolQueueSize": "0", "pullThreadPoolQueueHeadWaitTimeMills": "0",
            "pageCacheLockTimeMills": "0", **self.b.rates.runtime(), **self._schedule_offsets(),
        }
        return cmd.response(body=json.dumps({"table": table}, sort_keys=True).encode())
