"""Where a consumer keeps its offsets: on the broker for CLUSTERING (committed every 5 s and when a
queue is dropped or the consumer stops), in a local file for BROADCASTING (every member has its
own; Java's ``~/.rocketmq_offsets/<clientId>/<group>/offsets.json``)."""
from __future__ import annotations

import json
import os

from client.errors import MQBrokerError
from client.instance import ClientInstance, MessageQueue
from remoting.codes import RequestCode as R, ResponseCode as RC


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

    async def commit(self, mq: MessageQueue, addr: str) -> None:
        off = self.table.get(mq)
        if off is not None and self.committed.get(mq) != off:
            await self.instance.call(addr, R.UPDATE_CONSUMER_OFFSET, {"consumerGroup": self.group, "topic": mq.topic,
                                                                       "queueId": str(mq.queue_id), "commitOffset": str(off)})
            self.committed[mq] = off


class LocalOffsets:
    def __init__(self, directory: str, client_id: str, group: str):
        self.path = os.path.join(directory, client_id.replace("@", "_").replace("#", "_"), group, "offsets.json")
        self.table: dict[MessageQueue, int] = {}
        try:
            with open(self.path) as f:
                for k, v in json.load(f)["offsetTable"].items():
                    topic, broker, qid = k.rsplit("|", 2)
                    self.table[MessageQueue(topic, broker, int(qid))] = int(v)
        except (OSError, ValueError, KeyError):
            pass

    async def read(self, mq: MessageQueue, _addr: str) -> int | None:
        return self.table.get(mq)

    def update(self, mq: MessageQueue, offset: int) -> None:
        self.table[mq] = offset

    async def commit(self, _mq: MessageQueue, _addr: str) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"offsetTable": {f"{q.topic}|{q.broker_name}|{q.queue_id}": o for q, o in self.table.items()}}, f)
        os.replace(tmp, self.path)
