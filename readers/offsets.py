"""Offsets (FACTS §3.5): a group's committed offsets (QUERY/UPDATE_CONSUMER_OFFSET, and
INVOKE_BROKER_TO_RESET_OFFSET, ``mqadmin resetOffsetByTime``) and a queue's offsets and times
(GET_MAX/MIN_OFFSET, GET_EARLIEST_MSG_STORETIME, SEARCH_OFFSET_BY_TIMESTAMP), as
broker:processor/ConsumerManageProcessor.java and AdminBrokerProcessor.java answer them.
"""
from __future__ import annotations

import json

from rocketbox.readers.clients import NOT_ONLINE
from rocketbox.remoting import headers, mqtable
from rocketbox.remoting.codec import Command
from rocketbox.remoting.codes import V3_0_7_SNAPSHOT
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.remoting.headers import HeaderError
from rocketbox.shm.layout import T
from rocketbox.store import groupconfig


def offset_key(topic: str, group: str) -> bytes:
    """``store.groupconfig.offset_key``; a topic and group too long for the offset table are refused
    as header values (SYSTEM_ERROR naming the limit), not as a failure of the reader."""
    try:
        return groupconfig.offset_key(topic, group)
    except ValueError as e:
        raise HeaderError(str(e)) from None


class OffsetProcessor:
    def __init__(self, broker):
        self.b, self.cfg, self.link, self.view, self.topics = broker, broker.cfg, broker.link, broker.view, broker.topics

    def handlers(self) -> dict:
        return {R.QUERY_CONSUMER_OFFSET: self.query_offset, R.UPDATE_CONSUMER_OFFSET: self.update_offset,
                R.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset, R.GET_MAX_OFFSET: self.max_offset,
                R.GET_MIN_OFFSET: self.min_offset, R.GET_EARLIEST_MSG_STORETIME: self.earliest_time,
                R.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset}

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

    def earliest_time(self, cmd, _conn):
        h, (lo, hi) = self._bounds(cmd)
        ts = self.view.stored_at(h["topic"], h["queueId"], lo) if hi > lo else None
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
            ts = self.view.stored_at(topic, qid, mid)
            if ts is None or ts >= want:
                b = mid
            else:
                a = mid + 1
        if a > lo:                                    # an earlier neighbour: nearer, or as near?
            before = self.view.stored_at(topic, qid, a - 1)
            after = self.view.stored_at(topic, qid, a) if a < hi else None
            if before is not None and (after is None or (after != want and want - before <= after - want)):
                a -= 1
        return a
