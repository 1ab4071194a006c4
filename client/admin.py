"""What an operator asks of a cluster, as ``mqadmin topicStatus`` and ``consumerProgress`` ask it
(tools:admin/DefaultMQAdminExtImpl.java): a topic's queues, and how far behind a group is.

Both go to every master broker of a route from the name servers: the topic's own route for
``topic_status``; for ``consume_progress``, the route of the group's retry topic (``%RETRY%<group>``,
which every broker a consumer ever sent a heartbeat to has), as Java's ``examineConsumeStats`` does.
"""
from __future__ import annotations

from dataclasses import dataclass

from client.errors import MQBrokerError
from client.instance import ClientInstance, MessageQueue
from remoting import mqtable
from remoting.codes import RequestCode as R, ResponseCode as RC


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


class Admin:
    def __init__(self, namesrv: str, *, instance: ClientInstance | None = None):
        self.instance = instance or ClientInstance(namesrv)

    async def start(self) -> "Admin":
        await self.instance.start()
        return self

    async def shutdown(self) -> None:
        await self.instance.stop()

    async def __aenter__(self):
        return await self.start()

    async def __aexit__(self, *exc):
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

    async def consume_progress(self, group: str, topic: str | None = None) -> ConsumeProgress:
        """The group's committed offsets against each queue's max, on every master that has its
        retry topic; MQBrokerError TOPIC_NOT_EXIST when no broker has met the group, and
        CONSUMER_NOT_ONLINE when none has an offset of it."""
        queues, tps = {}, 0.0
        try:
            masters = await self._masters("%RETRY%" + group)
        except MQBrokerError as e:
            if e.code != RC.TOPIC_NOT_EXIST:
                raise
            raise MQBrokerError(e.code, f"no broker knows consumer group {group} ({e.remark})", e.addr) from None
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
