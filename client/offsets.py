"""Where a consumer keeps its offsets: on the broker for CLUSTERING (committed every 5 s and when a
queue is dropped or the consumer stops), in a local file for BROADCASTING (every member has its
own; Java's ``~/.rocketmq_offsets/<clientId>/<group>/offsets.json``)."""
from __future__ import annotations

import os

from rocketbox.client.errors import MQBrokerError, MQClientError
from rocketbox.client.instance import ClientInstance, MessageQueue
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.store import configfile
from rocketbox.store.errors import StoreError


class RemoteOffsets:
    def __init__(self, instance: ClientInstance, group: str):
        self.instance, self.group = instance, group
        self.table: dict[MessageQueue, int] = {}
        self.committed: dict[MessageQueue, int] = {}

    async def read(self, mq: MessageQueue, addr: str) -> int | None:
        """The broker's committed offset, None when it has none (QUERY_NOT_FOUND)."""
        try:
            resp = await self.instance.call(addr, R.QUERY_CONSUMER_OFFSET, {"consumerGroup": self.group,
                                                                             "topic": mq.topic, "queueId": str(mq.queue_id)})
        except MQBrokerError as e:
            if e.code == RC.QUERY_NOT_FOUND:
                return None
            raise
        return int(resp.ext["offset"])

    def update(self, mq: MessageQueue, offset: int) -> None:
        self.table[mq] = offset

    def forget(self, mq: MessageQueue) -> None:
        """A queue given up: its offset is the new owner's now, so a later commit of this member's
        (every 5 s) must not move it back (Java's ``RemoteBrokerOffsetStore.removeOffset``)."""
        self.table.pop(mq, None)
        self.committed.pop(mq, None)

    async def commit(self, mq: MessageQueue, addr: str) -> None:
        off = self.table.get(mq)
        if off is not None and self.committed.get(mq) != off:
            await self.instance.call(addr, R.UPDATE_CONSUMER_OFFSET, {"consumerGroup": self.group, "topic": mq.topic,
                                                                       "queueId": str(mq.queue_id), "commitOffset": str(off)})
            self.committed[mq] = off


class LocalOffsets:
    """Kept as Java's LocalFileOffsetStore keeps them: the file, else its ``.bak``; a member whose
    file and ``.bak`` are both there but unreadable does not start (MQClientError naming them),
    rather than start over from ``consume_from`` and skip or repeat what it had consumed."""

    def __init__(self, directory: str, client_id: str, group: str):
        self.path = os.path.join(directory, client_id.replace("@", "_").replace("#", "_"), group, "offsets.json")
        self.table: dict[MessageQueue, int] = {}
        try:
            data = configfile.read(self.path) or {"offsetTable": {}}
            for k, v in data["offsetTable"].items():
                topic, broker, qid = k.rsplit("|", 2)
                self.table[MessageQueue(topic, broker, int(qid))] = int(v)
        except (StoreError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise MQClientError(f"the offsets of broadcasting group {group} in {self.path} cannot be read: {e}") from None

    async def read(self, mq: MessageQueue, _addr: str) -> int | None:
        return self.table.get(mq)

    def update(self, mq: MessageQueue, offset: int) -> None:
        self.table[mq] = offset

    def forget(self, mq: MessageQueue) -> None:
        """Kept: the file is this member's alone (Java's ``LocalFileOffsetStore`` keeps it too)."""

    async def commit(self, _mq: MessageQueue, _addr: str) -> None:
        configfile.write(self.path, {"offsetTable": {f"{q.topic}|{q.broker_name}|{q.queue_id}": o
                                                     for q, o in self.table.items()}})
