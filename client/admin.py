"""What an operator asks of a cluster, as ``mqadmin`` asks it (tools:admin/DefaultMQAdminExtImpl.java):
the brokers and their traffic (``clusterList``), a topic's queues (``topicStatus``), how far behind
a group is (``consumerProgress``), a group's members (``consumerConnection``) and what each says of
itself (``consumerStatus``), a producer group's clients (``producerConnection``), which groups
consume a topic, a group's offsets moved to a time (``resetOffsetByTime``), and messages by key,
by msgId and by offsetMsgId (``queryMsgByKey``, ``queryMsgByUniqueKey``, ``queryMsgById``).

They go to every master broker of a route from the name servers: the topic's own route, or for
what is asked of a consumer group, the route of its retry topic (``%RETRY%<group>``, which every
broker a consumer ever sent a heartbeat to has), as Java's ``examineConsumeStats`` and
``examineConsumerConnectionInfo`` do.
"""
from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from rocketbox.client import running
from rocketbox.client.errors import MQBrokerError, MQClientError
from rocketbox.client.instance import JSON, ClientInstance, MessageQueue
from rocketbox.client.message import MessageExt, decode_messages
from rocketbox.remoting import mqtable
from rocketbox.remoting.codec import Command
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.store import message
from rocketbox.store.configfile import loads_tolerant

END_OF_TIME = (1 << 63) - 1      # Java's Long.MAX_VALUE: a query's open end


@dataclass(frozen=True)
class QueueStatus:
    min_offset: int
    max_offset: int
    last_update_ms: int          # store time of the queue's last message; 0 when it has none


@dataclass(frozen=True)
class QueueProgress:
    broker_offset: int           # the queue's max offset
    consumer_offset: int         # the group's committed offset (0 when it has none)
    last_ms: int                 # store time of the last message the group consumed; 0 when none

    @property
    def diff(self) -> int:
        return self.broker_offset - self.consumer_offset


@dataclass(frozen=True)
class ConsumeProgress:
    queues: dict[MessageQueue, QueueProgress]
    consume_tps: float

    @property
    def diff_total(self) -> int:
        return sum(q.diff for q in self.queues.values())


@dataclass(frozen=True)
class ClientConnection:
    client_id: str
    client_addr: str             # host:port the broker sees it at
    language: str                # JAVA, CPP, PYTHON...
    version: int                 # the client's MQVersion ordinal


@dataclass(frozen=True)
class ConsumerConnection:
    connections: list[ClientConnection]
    consume_type: str | None     # CONSUME_PASSIVELY (push) or CONSUME_ACTIVELY (pull)
    message_model: str | None    # CLUSTERING or BROADCASTING
    consume_from: str | None     # where a new member starts (ConsumeFromWhere)
    subscriptions: dict[str, str]    # topic -> subscription expression


@dataclass(frozen=True)
class BrokerStatus:
    """One broker as ``mqadmin clusterList`` shows it."""
    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    version: str
    in_tps: float                # messages put per second over the last 10 s
    out_tps: float               # messages pulled per second over the last 10 s
    in_today: int
    out_today: int
    in_yesterday: int
    out_yesterday: int
    earliest_ms: int             # store time of its oldest message; -1 when it has none
    disk_ratio: float            # used share of its CommitLog's file system
    max_offset: int = 0          # its CommitLog's end
    lag_bytes: int | None = None  # a slave: how far behind its master's CommitLog (None: a master, or unknown)
    lag_ms: int | None = None    # a slave: how long ago its master wrote the first byte it lacks (rocketbox masters)
    down: str = ""               # why it did not answer ("" when it did)


def _connections(entries: Iterable[JSON]) -> list[ClientConnection]:
    return [ClientConnection(c.get("clientId", ""), c.get("clientAddr", ""), c.get("language", ""),
                             int(c.get("version", 0))) for c in entries]


class Admin:
    """What ``mqadmin`` asks of brokers and name servers: topics and their queues, consumer groups'
    progress and members, offsets reset by time, messages by id, the cluster's brokers."""

    def __init__(self, namesrv: str, *, instance: ClientInstance | None = None) -> None:
        self.instance = instance or ClientInstance(namesrv)

    async def start(self) -> Admin:
        """Start the client instance. -> self."""
        await self.instance.start()
        return self

    async def shutdown(self) -> None:
        """Close the connections (shared ones once unused)."""
        await self.instance.stop()

    async def __aenter__(self) -> Admin:
        return await self.start()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.shutdown()

    async def _masters(self, topic: str) -> dict[str, str]:
        return (await self.instance.route(topic, refresh=True)).masters

    async def topic_status(self, topic: str) -> dict[MessageQueue, QueueStatus]:
        """Every write queue of the topic on every master: offsets and last store time."""
        out = {}
        for addr in sorted((await self._masters(topic)).values()):
            resp = await self.instance.call(addr, R.GET_TOPIC_STATS_INFO, {"topic": topic})
            _fields, table = mqtable.decode(resp.body, "offsetTable")
            for (t, broker, qid), v in table.items():
                out[MessageQueue(t, broker, qid)] = QueueStatus(int(v.get("minOffset", 0)), int(v.get("maxOffset", 0)),
                                                                int(v.get("lastUpdateTimestamp", 0)))
        return dict(sorted(out.items(), key=lambda kv: kv[0].sort_key()))

    async def topic_attributes(self, topic: str, **attributes: int) -> None:
        """Set rocketbox's topic attributes (``retentionMs``, ``purgedBeforeMs``) on every master
        that has the topic: UPDATE_AND_CREATE_TOPIC with its config as the broker has it, plus these."""
        for addr in sorted((await self._masters(topic)).values()):
            resp = await self.instance.call(addr, R.GET_ALL_TOPIC_CONFIG)
            tc = json.loads(resp.body)["topicConfigTable"][topic]
            await self.instance.call(addr, R.UPDATE_AND_CREATE_TOPIC, {
                "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(tc["readQueueNums"]),
                "writeQueueNums": str(tc["writeQueueNums"]), "perm": str(tc["perm"]),
                "topicFilterType": tc.get("topicFilterType", "SINGLE_TAG"), "topicSysFlag": str(tc.get("topicSysFlag", 0)),
                "order": str(tc.get("order", False)).lower(), **{k: str(v) for k, v in attributes.items()}})

    async def _group_masters(self, group: str) -> dict[str, str]:
        """The masters of the group's retry topic; MQBrokerError TOPIC_NOT_EXIST naming the group
        when no broker has met it."""
        try:
            return await self._masters("%RETRY%" + group)
        except MQBrokerError as e:
            if e.code != RC.TOPIC_NOT_EXIST:
                raise
            raise MQBrokerError(e.code, f"no broker knows consumer group {group} ({e.remark})", e.addr) from None

    async def consume_progress(self, group: str, topic: str | None = None) -> ConsumeProgress:
        """The group's committed offsets against each queue's max, on every master that has its
        retry topic; MQBrokerError TOPIC_NOT_EXIST when no broker has met the group, and
        CONSUMER_NOT_ONLINE when none has an offset of it."""
        queues, tps = {}, 0.0
        masters = await self._group_masters(group)
        for addr in sorted(masters.values()):
            resp = await self.instance.call(addr, R.GET_CONSUME_STATS, {"consumerGroup": group, "topic": topic or ""})
            fields, table = mqtable.decode(resp.body, "offsetTable")
            tps += float(fields.get("consumeTps", 0))
            for (t, broker, qid), v in table.items():
                queues[MessageQueue(t, broker, qid)] = QueueProgress(
                    int(v.get("brokerOffset", 0)), int(v.get("consumerOffset", 0)), int(v.get("lastTimestamp", 0)))
        if not queues:
            raise MQBrokerError(RC.CONSUMER_NOT_ONLINE, "Not found the consumer group consume stats, because return "
                                "offset table is empty, maybe the consumer not consume any message", "")
        return ConsumeProgress(dict(sorted(queues.items(), key=lambda kv: kv[0].sort_key())), tps)

    async def consumer_connection(self, group: str) -> ConsumerConnection:
        """The group's members on every master of its retry topic, and how it consumes what;
        MQBrokerError CONSUMER_NOT_ONLINE when no broker has a member of it now."""
        conns: dict[str, ClientConnection] = {}
        fields: dict[str, Any] = {}
        subs: dict[str, str] = {}
        for addr in sorted((await self._group_masters(group)).values()):
            resp = await self.instance.call(addr, R.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group},
                                            ok=(RC.SUCCESS, RC.CONSUMER_NOT_ONLINE))
            if resp.code != RC.SUCCESS:
                continue
            body = json.loads(resp.body)
            for c in _connections(body.get("connectionSet") or ()):
                conns.setdefault(c.client_id, c)
            for k in ("consumeType", "messageModel", "consumeFromWhere"):
                fields.setdefault(k, body.get(k))
            for topic, sd in (body.get("subscriptionTable") or {}).items():
                subs.setdefault(topic, sd.get("subString", "*"))
        if not conns:
            raise MQBrokerError(RC.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online", "")
        return ConsumerConnection([conns[c] for c in sorted(conns)], fields.get("consumeType"),
                                  fields.get("messageModel"), fields.get("consumeFromWhere"), dict(sorted(subs.items())))

    async def consumer_running_info(self, group: str, client_id: str, jstack: bool = False) -> running.RunningInfo:
        """What the member ``client_id`` of ``group`` says of itself (GET_CONSUMER_RUNNING_INFO, which
        the broker puts to the consumer over its own connection), asked of the first master of the
        group's retry topic as Java's admin asks it; MQBrokerError SYSTEM_ERROR when the consumer is
        not online there, CONSUME_MSG_TIMEOUT when it does not answer."""
        addr = min((await self._group_masters(group)).values())
        resp = await self._ask_consumer(addr, R.GET_CONSUMER_RUNNING_INFO, {
            "consumerGroup": group, "clientId": client_id, "jstackEnable": str(jstack).lower()})
        try:
            return running.decode(resp.body)
        except ValueError as e:
            raise MQClientError(f"consumer {client_id} of {group} answered with no ConsumerRunningInfo: {e}") from None

    async def consume_message_directly(self, group: str, client_id: str, msg_id: str) -> JSON:
        """Have the member ``client_id`` of ``group`` consume the stored message ``msg_id`` (an
        offsetMsgId) now, through the broker that stored it (CONSUME_MESSAGE_DIRECTLY, as Java's
        admin sends it); -> its ConsumeMessageDirectlyResult (``consumeResult`` CR_SUCCESS,
        CR_LATER, CR_THROW_EXCEPTION...)."""
        try:
            ip, port, _phys = message.parse_offset_msg_id(msg_id)
        except ValueError as e:
            raise MQClientError(f"msgId {msg_id!r} is not a message id: {e}") from None
        addr = f"{ipaddress.ip_address(ip)}:{port}"
        resp = await self._ask_consumer(addr, R.CONSUME_MESSAGE_DIRECTLY,
                                        {"consumerGroup": group, "clientId": client_id, "msgId": msg_id})
        result: JSON = json.loads(resp.body)
        return result

    async def query_messages(self, topic: str, key: str, max_num: int = 64, begin_ms: int = 0,
                             end_ms: int = END_OF_TIME) -> list[MessageExt]:
        """The messages of ``topic`` with ``key`` among their keys (``Message(keys=...)``), stored
        within [begin_ms, end_ms], from every master of the topic (QUERY_MESSAGE, as Java's
        ``queryMessage``): each broker's newest ``max_num`` (at most 64), newest first. Exact
        matches only (a 4.9.8 broker also answers other keys of the same hash: they are
        dropped here, as Java's client drops them)."""
        return await self._query(topic, key, max_num, begin_ms, end_ms, unique=False)

    async def query_unique(self, topic: str, msg_id: str) -> MessageExt:
        """The message of ``topic`` whose msgId (UNIQ_KEY: what its send returned) is ``msg_id``;
        the first stored when a retry stored it twice, as Java's ``queryMessageByUniqKey``.
        MQBrokerError 22 when no broker has it."""
        found = await self._query(topic, msg_id, 32, 0, END_OF_TIME, unique=True)
        return min(found, key=lambda m: m.store_timestamp)

    async def _query(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int,
                     unique: bool) -> list[MessageExt]:
        ext = {"topic": topic, "key": key, "maxNum": str(max_num), "beginTimestamp": str(begin_ms),
               "endTimestamp": str(end_ms)}
        if unique:
            ext["_UNIQUE_KEY_QUERY"] = "true"
        out, missing = [], None
        for name, addr in sorted((await self._masters(topic)).items()):
            try:
                resp = await self.instance.call(addr, R.QUERY_MESSAGE, ext)
            except MQBrokerError as e:
                if e.code != RC.QUERY_NOT_FOUND:
                    raise
                missing = e
                continue
            out += [m for m in decode_messages(resp.body, name) if m.topic == topic and
                    (m.properties.get("UNIQ_KEY") == key if unique else key in m.keys)]
        if not out and missing is not None:
            raise missing
        return sorted(out, key=lambda m: -m.store_timestamp)

    async def view_message(self, offset_msg_id: str) -> MessageExt:
        """The message stored where ``offset_msg_id`` says (the store's id: its broker's address and
        CommitLog offset), asked of that address (VIEW_MESSAGE_BY_ID, as Java's ``viewMessage``)."""
        try:
            ip, port, phys = message.parse_offset_msg_id(offset_msg_id)
        except ValueError as e:
            raise MQClientError(f"msgId {offset_msg_id!r} is not an offsetMsgId: {e}") from None
        resp = await self.instance.call(f"{ipaddress.ip_address(ip)}:{port}", R.VIEW_MESSAGE_BY_ID,
                                        {"offset": str(phys)})
        return decode_messages(resp.body)[0]

    async def _ask_consumer(self, addr: str, code: int, ext: dict[str, str]) -> Command:
        """A request the broker at ``addr`` puts to a consumer: given Java admin's three times the
        usual time, and the broker's own 10 s for the consumer's answer on top."""
        return await self.instance.call(addr, code, ext, timeout_s=3 * self.instance.timeout_s + 10)

    async def reset_offsets(self, group: str, topic: str, timestamp: int, force: bool = True,
                            cpp: bool = False) -> dict[MessageQueue, int]:
        """Move ``group``'s offsets on ``topic`` back (or on, with ``force``) to the messages
        stored at ``timestamp`` (ms; -1: each queue's end), as ``mqadmin resetOffsetByTime`` does,
        on every master of the topic: the broker has the group's members start over from there
        (INVOKE_BROKER_TO_RESET_OFFSET); a broker with none of them online answers
        CONSUMER_NOT_ONLINE, and the offsets are then committed here, queue by queue (Java's
        resetOffsetByTimestampOld).  Without ``force`` a queue only moves back.  ``cpp``: the
        members are C++ clients, sent the table in their form (``mqadmin -c``: the request goes in
        the CPP language).  -> each queue's offset now."""
        out: dict[MessageQueue, int] = {}
        for addr in sorted((await self._masters(topic)).values()):
            resp = await self.instance.call(addr, R.INVOKE_BROKER_TO_RESET_OFFSET, {
                "topic": topic, "group": group, "timestamp": str(timestamp), "isForce": str(force).lower()},
                ok=(RC.SUCCESS, RC.CONSUMER_NOT_ONLINE), language="CPP" if cpp else "PYTHON")
            if resp.code == RC.SUCCESS:
                out.update((MessageQueue(*k), int(v)) for k, v in mqtable.decode(resp.body, "offsetTable")[1].items())
            else:
                out.update(await self._commit_offsets_at(addr, group, topic, timestamp, force))
        return dict(sorted(out.items(), key=lambda kv: kv[0].sort_key()))

    async def _commit_offsets_at(self, addr: str, group: str, topic: str, timestamp: int,
                                 force: bool) -> dict[MessageQueue, int]:
        """The broker at ``addr`` has no member of ``group`` online: each queue of ``topic`` it
        has the group's offset on (else each of its queues, from its min offset) is committed at
        the message stored at ``timestamp`` (its max offset for -1) when ``force`` or when that is
        not after the committed offset."""
        resp = await self.instance.call(addr, R.GET_CONSUME_STATS, {"consumerGroup": group, "topic": ""})
        committed = {MessageQueue(*k): int(v.get("consumerOffset", 0))
                     for k, v in mqtable.decode(resp.body, "offsetTable")[1].items() if k[0] == topic}
        if not committed:
            resp = await self.instance.call(addr, R.GET_TOPIC_STATS_INFO, {"topic": topic})
            committed = {MessageQueue(*k): int(v.get("minOffset", 0))
                         for k, v in mqtable.decode(resp.body, "offsetTable")[1].items()}
        out = {}
        for mq, offset in committed.items():
            ext = {"topic": topic, "queueId": str(mq.queue_id)}
            if timestamp == -1:
                at = int((await self.instance.call(addr, R.GET_MAX_OFFSET, ext)).ext["offset"])
            else:
                at = int((await self.instance.call(addr, R.SEARCH_OFFSET_BY_TIMESTAMP,
                                                   {**ext, "timestamp": str(timestamp)})).ext["offset"])
            out[mq] = offset
            if force or at <= offset:
                await self.instance.call(addr, R.UPDATE_CONSUMER_OFFSET, {
                    "consumerGroup": group, **ext, "commitOffset": str(at)})
                out[mq] = at
        return out

    async def producer_connection(self, group: str, topic: str) -> list[ClientConnection]:
        """The producer group's clients on every master of ``topic`` (as mqadmin's, which finds
        the brokers by a topic the group sends to); MQBrokerError SYSTEM_ERROR when none has one."""
        conns: dict[str, ClientConnection] = {}
        for addr in sorted((await self._masters(topic)).values()):
            resp = await self.instance.call(addr, R.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group},
                                            ok=(RC.SUCCESS, RC.SYSTEM_ERROR))
            if resp.code == RC.SUCCESS:
                for c in _connections(json.loads(resp.body).get("connectionSet") or ()):
                    conns.setdefault(c.client_id, c)
        if not conns:
            raise MQBrokerError(RC.SYSTEM_ERROR, f"the producer group[{group}] not exist", "")
        return [conns[c] for c in sorted(conns)]

    async def consumed_by(self, topic: str) -> list[str]:
        """The consumer groups that subscribe to ``topic`` now or have offsets on it, on every
        master of its route."""
        groups: set[str] = set()
        for addr in sorted((await self._masters(topic)).values()):
            resp = await self.instance.call(addr, R.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic})
            groups.update(json.loads(resp.body).get("groupList") or ())
        return sorted(groups)

    async def create_topic(self, topic: str, read_queues: int = 8, write_queues: int = 8, perm: int = 6,
                           order: bool = False, *, cluster: str | None = None, broker: str | None = None) -> list[str]:
        """UPDATE_AND_CREATE_TOPIC on every master of ``cluster`` (as ``mqadmin updateTopic -c``:
        the topic then has queues on each broker group, and a producer spreads its sends over them),
        or on the broker at ``broker``; -> the addresses that took it.  MQClientError naming a
        cluster the name servers do not know."""
        if broker is not None:
            addrs = [broker]
        else:
            resp = await self.instance.call_namesrv(R.GET_BROKER_CLUSTER_INFO, what="the cluster")
            info = loads_tolerant(resp.body.decode())
            names = (info.get("clusterAddrTable") or {}).get(cluster)
            if not names:
                raise MQClientError(f"no cluster {cluster!r} at the name servers (clusters: "
                                    f"{', '.join(sorted(info.get('clusterAddrTable') or {})) or 'none'})")
            table = info.get("brokerAddrTable") or {}
            addrs = sorted(a for n in names for k, a in ((table.get(n) or {}).get("brokerAddrs") or {}).items()
                           if int(k) == 0)
        for addr in addrs:
            await self.instance.call(addr, R.UPDATE_AND_CREATE_TOPIC, {
                "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(read_queues),
                "writeQueueNums": str(write_queues), "perm": str(perm), "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": "0", "order": str(order).lower()})
        return addrs

    async def cluster(self) -> list[BrokerStatus]:
        """Every broker the name servers know (GET_BROKER_CLUSTER_INFO from the first that
        answers), each with its runtime figures (GET_BROKER_RUNTIME_INFO)."""
        resp = await self.instance.call_namesrv(R.GET_BROKER_CLUSTER_INFO, what="the cluster")
        info, out = loads_tolerant(resp.body.decode()), []
        for cluster, names in sorted((info.get("clusterAddrTable") or {}).items()):
            for name in sorted(names):
                addrs = ((info.get("brokerAddrTable") or {}).get(name) or {}).get("brokerAddrs") or {}
                master: dict[str, str] = {}
                for bid, addr in sorted((int(k), v) for k, v in addrs.items()):
                    try:
                        t = json.loads((await self.instance.call(addr, R.GET_BROKER_RUNTIME_INFO)).body)["table"]
                    except MQClientError as e:
                        out.append(BrokerStatus(cluster, name, bid, addr, "", 0.0, 0.0, 0, 0, 0, 0, -1, 0.0, down=str(e)))
                        continue
                    if bid == 0:
                        master = t
                    lag_bytes = lag_ms = None
                    if bid != 0 and master:
                        lag_bytes = max(0, int(master.get("commitLogMaxOffset", 0)) - int(t.get("commitLogMaxOffset", 0)))
                        lag_ms = int(master["haSlaveLagMs"]) if "haSlaveLagMs" in master else None
                    n = {k: int(t.get(k, 0)) for k in ("msgPutTotalYesterdayMorning", "msgPutTotalTodayMorning",
                                                       "msgPutTotalTodayNow", "msgGetTotalYesterdayMorning",
                                                       "msgGetTotalTodayMorning", "msgGetTotalTodayNow")}
                    out.append(BrokerStatus(
                        cluster, name, bid, addr, t.get("brokerVersionDesc", ""),
                        float(t.get("putTps", "0").split(" ")[0] or 0), float(t.get("getTransferedTps", "0").split(" ")[0] or 0),
                        n["msgPutTotalTodayNow"] - n["msgPutTotalTodayMorning"],
                        n["msgGetTotalTodayNow"] - n["msgGetTotalTodayMorning"],
                        n["msgPutTotalTodayMorning"] - n["msgPutTotalYesterdayMorning"],
                        n["msgGetTotalTodayMorning"] - n["msgGetTotalYesterdayMorning"],
                        int(t.get("earliestMessageTimeStamp", -1)), float(t.get("commitLogDiskRatio", 0)),
                        int(t.get("commitLogMaxOffset", 0)), lag_bytes, lag_ms))
        return out

    async def _master_addrs(self) -> list[tuple[str, str]]:
        """(broker name, master address) of every broker of the name server's cluster."""
        resp = await self.instance.call_namesrv(R.GET_BROKER_CLUSTER_INFO, what="the cluster")
        out = []
        for name, broker in sorted((loads_tolerant(resp.body.decode()).get("brokerAddrTable") or {}).items()):
            addr = (broker.get("brokerAddrs") or {}).get("0") or (broker.get("brokerAddrs") or {}).get(0)
            if addr is not None:
                out.append((name, addr))
        return out

    async def timers(self) -> list[tuple[str, int, int]]:
        """Every broker's pending timers: (broker name, how many, the earliest's delivery time in
        epoch ms, 0 when none) (``timerPending``, ``timerNextDueMs`` of GET_BROKER_RUNTIME_INFO,
        the scheduler's checkpoint, written every second while timers move)."""
        out = []
        for name, addr in await self._master_addrs():
            t = json.loads((await self.instance.call(addr, R.GET_BROKER_RUNTIME_INFO)).body)["table"]
            if "timerPending" in t:
                out.append((name, int(t["timerPending"]), int(t.get("timerNextDueMs", 0))))
        return out

    async def cancel_timer(self, msg_id: str) -> str:
        """Cancel the pending timer whose msgId (what its send returned) or offsetMsgId is
        ``msg_id``: it is never delivered -> the broker's remark.  MQBrokerError with code 22 when
        no broker holds it, 13 when it came due first."""
        missing = None
        for _name, addr in await self._master_addrs():
            try:
                return (await self.instance.call(addr, R.CANCEL_TIMER, {"msgId": msg_id})).remark or ""
            except MQBrokerError as e:
                if e.code != RC.QUERY_NOT_FOUND:
                    raise
                missing = e
        raise missing or MQBrokerError(RC.QUERY_NOT_FOUND, f"no timer message with msgId {msg_id}")

    async def delayed(self) -> list[tuple[str, int, int, int]]:
        """Every broker's delayed messages by level: (broker name, level, delivered through, stored)
        queue offsets of SCHEDULE_TOPIC_XXXX's queue of the level (``scheduleMessageOffset_<level>``
        of GET_BROKER_RUNTIME_INFO; the scheduler writes its progress every 10 s)."""
        out = []
        for name, addr in await self._master_addrs():
            t = json.loads((await self.instance.call(addr, R.GET_BROKER_RUNTIME_INFO)).body)["table"]
            for key, value in t.items():
                if key.startswith("scheduleMessageOffset_"):
                    done, stored = (int(v) for v in value.split(","))
                    out.append((name, int(key.rsplit("_", 1)[1]), done, stored))
        return sorted(out)
