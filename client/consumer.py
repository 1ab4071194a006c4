"""Consumers: ``PushConsumer`` (long polling, a listener per batch, CLUSTERING with
AllocateMessageQueueAveragely and offsets on the broker, or BROADCASTING with offsets in a local
file) and ``PullConsumer`` (assign, seek, pull).

A push consumer rebalances every 20 s and whenever a broker says the group changed
(NOTIFY_CONSUMER_IDS_CHANGED).  Each owned queue has one pull loop: pull (held by the broker up to
15 s), re-check tags on strings, hand the batch to the listener, move the offset.  A batch the
listener fails is offered again after 1 s (sending it back to a retry topic arrives with retry and
dead-letter queues).  Offsets are committed every 5 s, when a queue is given up and at shutdown.
"""
from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import time
from dataclasses import dataclass

from client.errors import MQClientError
from client.instance import ClientInstance, MessageQueue, stop_tasks
from client.message import MessageExt, decode_messages
from client.offsets import LocalOffsets, RemoteOffsets
from client.rebalance import allocate_averagely
from remoting.codes import RequestCode as R, ResponseCode as RC
from remoting.subscription import parse_expression
from store.javahash import string_hash

log = logging.getLogger("rocketbox.client")
REBALANCE_S, COMMIT_S, PULL_ERROR_DELAY_S, RETRY_DELAY_S = 20.0, 5.0, 3.0, 1.0
COMMIT_OFFSET, SUSPEND, SUBSCRIPTION = 0x1, 0x2, 0x4


@dataclass
class PullResult:
    status: str               # FOUND, NO_NEW_MSG, NO_MATCHED_MSG, OFFSET_ILLEGAL
    next_offset: int
    min_offset: int
    max_offset: int
    messages: list


_STATUS = {RC.SUCCESS: "FOUND", RC.PULL_NOT_FOUND: "NO_NEW_MSG", RC.PULL_RETRY_IMMEDIATELY: "NO_MATCHED_MSG",
           RC.PULL_OFFSET_MOVED: "OFFSET_ILLEGAL"}


async def pull_queue(instance: ClientInstance, addr: str, group: str, mq: MessageQueue, offset: int, max_nums: int,
                     expr: str, tags: list[str], sub_version: int, suspend_ms: int, commit: int | None) -> PullResult:
    """One PULL_MESSAGE; messages re-filtered by tag string."""
    flag = SUBSCRIPTION | (SUSPEND if suspend_ms else 0) | (COMMIT_OFFSET if commit is not None else 0)
    ext = {"consumerGroup": group, "topic": mq.topic, "queueId": str(mq.queue_id), "queueOffset": str(offset),
           "maxMsgNums": str(max_nums), "sysFlag": str(flag), "commitOffset": str(commit or 0),
           "suspendTimeoutMillis": str(suspend_ms), "subscription": expr, "subVersion": str(sub_version),
           "expressionType": "TAG"}
    resp = await instance.call(addr, R.PULL_MESSAGE, ext, timeout_s=suspend_ms / 1000 + instance.timeout_s,
                               ok=tuple(_STATUS))
    msgs = decode_messages(resp.body, mq.broker_name) if resp.code == RC.SUCCESS else []
    if tags:
        msgs = [m for m in msgs if m.tags in tags]
    return PullResult(_STATUS[resp.code], int(resp.ext["nextBeginOffset"]), int(resp.ext["minOffset"]),
                      int(resp.ext["maxOffset"]), msgs)


class PushConsumer:
    def __init__(self, group: str, namesrv: str, *, model: str = "CLUSTERING",
                 consume_from: str = "CONSUME_FROM_LAST_OFFSET", pull_batch: int = 32, suspend_ms: int = 15000,
                 offset_dir: str | None = None, instance: ClientInstance | None = None):
        if model not in ("CLUSTERING", "BROADCASTING"):
            raise ValueError(f"message model '{model}' is not CLUSTERING or BROADCASTING")
        self.group, self.model, self.consume_from = group, model, consume_from
        self.pull_batch, self.suspend_ms = pull_batch, suspend_ms
        self.instance = instance or ClientInstance(namesrv)
        self.subs: dict[str, tuple[str, list[str], int]] = {}      # topic -> (expression, tags, subVersion)
        self.listener = None
        self.pullers: dict[MessageQueue, asyncio.Task] = {}
        self.tasks: list[asyncio.Task] = []
        self.wake = asyncio.Event()
        self.rebalancing = asyncio.Lock()          # one rebalance at a time (Java's is synchronized too)
        self.offsets = (LocalOffsets(offset_dir or os.path.expanduser("~/.rocketmq_offsets"), self.instance.client_id, group)
                        if model == "BROADCASTING" else RemoteOffsets(self.instance, group))

    def subscribe(self, topic: str, expression: str = "*") -> "PushConsumer":
        expr, tags = parse_expression(expression)
        self.subs[topic] = (expr, tags, int(time.time() * 1000))
        return self

    def register(self, listener) -> "PushConsumer":
        """``listener(list[MessageExt]) -> bool`` (or a coroutine): True when the batch is consumed."""
        self.listener = listener
        return self

    def consumer_data(self) -> dict:
        subs = [{"classFilterMode": False, "codeSet": [string_hash(t) for t in tags], "expressionType": "TAG",
                 "subString": expr, "subVersion": ver, "tagsSet": tags, "topic": topic}
                for topic, (expr, tags, ver) in sorted(self.subs.items())]
        return {"consumeFromWhere": self.consume_from, "consumeType": "CONSUME_PASSIVELY", "groupName": self.group,
                "messageModel": self.model, "subscriptionDataSet": subs, "unitMode": False}

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> "PushConsumer":
        if self.listener is None or not self.subs:
            raise ValueError("subscribe to a topic and register a listener before start")
        if self.group in self.instance.consumers:
            raise ValueError(f"consumer group {self.group} already runs in this client instance")
        self.instance.consumers[self.group] = self
        await self.instance.start()
        for topic in self.subs:
            try:
                await self.instance.route(topic, refresh=True)
            except MQClientError as e:        # not created yet: rebalance keeps asking
                log.warning("no route for %s yet: %s", topic, e)
        await self.instance.heartbeat_all()
        loop = asyncio.get_running_loop()
        self.tasks = [loop.create_task(self._rebalance_loop()), loop.create_task(self._commit_loop())]
        return self

    async def shutdown(self) -> None:
        pullers, self.pullers = list(self.pullers.values()), {}     # (no loop owns its queue from here)
        await stop_tasks(self.tasks + pullers)
        await self._commit_all()
        self.instance.consumers.pop(self.group, None)
        await self.instance.unregister(consumerGroup=self.group)
        await self.instance.stop()

    def rebalance_soon(self) -> None:
        self.wake.set()

    # ------------------------------------------------------------ rebalance
    async def _rebalance_loop(self) -> None:
        while True:
            try:
                await self.rebalance()
            except MQClientError as e:
                log.warning("rebalance of %s failed: %s", self.group, e)
            try:
                await asyncio.wait_for(self.wake.wait(), REBALANCE_S)
            except asyncio.TimeoutError:
                pass
            self.wake.clear()

    async def rebalance(self) -> None:
        async with self.rebalancing:
            await self._rebalance()

    async def _rebalance(self) -> None:
        mine: set[MessageQueue] = set()
        for topic in self.subs:
            route = await self.instance.route(topic, refresh=True)
            queues = sorted(route.read_queues, key=MessageQueue.sort_key)
            if self.model == "BROADCASTING":
                mine.update(queues)
                continue
            addr = next(iter(sorted(route.masters.values())), None)
            if addr is None:
                continue
            resp = await self.instance.call(addr, R.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": self.group},
                                            ok=(RC.SUCCESS, RC.SYSTEM_ERROR))
            cids = [] if resp.code != RC.SUCCESS else json.loads(resp.body)["consumerIdList"]
            mine.update(allocate_averagely(self.instance.client_id, queues, cids))
        dropped = [q for q in self.pullers if q not in mine]
        await stop_tasks([self.pullers.pop(mq) for mq in dropped])
        for mq in dropped:
            await self._commit(mq)
            self.offsets.forget(mq)
            log.info("%s gave up %s", self.instance.client_id, mq)
        for mq in sorted(mine - set(self.pullers), key=MessageQueue.sort_key):
            self.pullers[mq] = asyncio.get_running_loop().create_task(self._pull_loop(mq))

    async def _start_offset(self, mq: MessageQueue, addr: str) -> int:
        stored = await self.offsets.read(mq, addr)
        if stored is not None and stored >= 0:
            return stored
        if self.consume_from == "CONSUME_FROM_FIRST_OFFSET" or mq.topic.startswith("%RETRY%"):
            return 0
        resp = await self.instance.call(addr, R.GET_MAX_OFFSET, {"topic": mq.topic, "queueId": str(mq.queue_id)})
        return int(resp.ext["offset"])

    # ------------------------------------------------------------ consuming
    async def _pull_loop(self, mq: MessageQueue) -> None:
        """Pull, consume, move on, while this loop owns ``mq`` (``pullers[mq]`` is its task).  A
        rebalance that gives the queue up also cancels the loop, but a cancellation can be lost
        (Python 3.11's ``wait_for`` drops one that lands as its reply arrives, which a busy loop
        makes likely; a listener may swallow one), and the loop would go on consuming a queue
        another member now owns: so it checks, as Java's ``ProcessQueue.isDropped``."""
        me = asyncio.current_task()
        expr, tags, ver = self.subs[mq.topic]
        offset = None
        while self.pullers.get(mq) is me:
            try:
                addr = (await self.instance.route(mq.topic)).masters[mq.broker_name]
                if offset is None:
                    offset = await self._start_offset(mq, addr)
                    self.offsets.update(mq, offset)
                committed = self.offsets.table.get(mq) if self.model == "CLUSTERING" else None
                res = await pull_queue(self.instance, addr, self.group, mq, offset, self.pull_batch, expr, tags, ver,
                                       self.suspend_ms, committed if committed else None)
            except (MQClientError, KeyError) as e:
                log.warning("pull from %s failed: %s", mq, e)
                await asyncio.sleep(PULL_ERROR_DELAY_S)
                continue
            if self.pullers.get(mq) is not me:       # given up while the pull was out: not ours to consume
                return
            if res.messages and not await self._consume(mq, res.messages, me):
                return
            if res.status == "OFFSET_ILLEGAL":
                log.warning("offset %d of %s is illegal; moving to %d", offset, mq, res.next_offset)
            offset = res.next_offset
            self.offsets.update(mq, offset)

    async def _consume(self, mq: MessageQueue, msgs: list[MessageExt], me: asyncio.Task) -> bool:
        """Hand ``msgs`` to the listener until it takes them (True), or until the queue is given
        up while they wait to be offered again (False)."""
        while self.pullers.get(mq) is me:
            try:
                ok = self.listener(msgs)
                if inspect.isawaitable(ok):
                    ok = await ok
            except Exception:
                log.exception("listener failed on %d messages of %s", len(msgs), mq)
                ok = False
            if ok is not False:
                return True
            await asyncio.sleep(RETRY_DELAY_S)
        return False

    # ------------------------------------------------------------ offsets
    async def _commit(self, mq: MessageQueue) -> None:
        try:
            route = await self.instance.route(mq.topic)
            await self.offsets.commit(mq, route.masters.get(mq.broker_name, ""))
        except MQClientError as e:
            log.warning("commit of %s failed: %s", mq, e)

    async def _commit_all(self) -> None:
        for mq in list(self.offsets.table):
            await self._commit(mq)

    async def _commit_loop(self) -> None:
        while True:
            await asyncio.sleep(COMMIT_S)
            await self._commit_all()


class PullConsumer:
    """Pull on your own terms: ``assign`` queues, ``seek`` to an offset, ``pull`` the next batch."""

    def __init__(self, group: str, namesrv: str, *, instance: ClientInstance | None = None):
        self.group = group
        self.instance = instance or ClientInstance(namesrv)
        self.positions: dict[MessageQueue, int] = {}

    async def start(self) -> "PullConsumer":
        await self.instance.start()
        return self

    async def shutdown(self) -> None:
        await self.instance.stop()

    async def queues(self, topic: str) -> list[MessageQueue]:
        return sorted((await self.instance.route(topic, refresh=True)).read_queues, key=MessageQueue.sort_key)

    async def _addr(self, mq: MessageQueue) -> str:
        return (await self.instance.route(mq.topic)).masters[mq.broker_name]

    async def assign(self, mqs: list[MessageQueue]) -> None:
        """Own these queues, starting from the group's committed offsets (0 where there are none)."""
        offsets = RemoteOffsets(self.instance, self.group)
        for mq in mqs:
            self.positions[mq] = await offsets.read(mq, await self._addr(mq)) or 0

    def seek(self, mq: MessageQueue, offset: int) -> None:
        self.positions[mq] = offset

    async def pull(self, mq: MessageQueue, max_nums: int = 32, expression: str = "*", block_ms: int = 0) -> PullResult:
        """The next batch of an assigned queue; ``block_ms`` > 0 waits for messages (long polling)."""
        expr, tags = parse_expression(expression)
        res = await pull_queue(self.instance, await self._addr(mq), self.group, mq, self.positions[mq], max_nums,
                               expr, tags, 0, block_ms, None)
        self.positions[mq] = res.next_offset
        return res

    async def commit(self, mq: MessageQueue | None = None) -> None:
        """Store the current position(s) as the group's committed offset on the broker."""
        offsets = RemoteOffsets(self.instance, self.group)
        for q in [mq] if mq is not None else list(self.positions):
            offsets.update(q, self.positions[q])
            await offsets.commit(q, await self._addr(q))

    async def offset_bounds(self, mq: MessageQueue) -> tuple[int, int]:
        addr, ext = await self._addr(mq), {"topic": mq.topic, "queueId": str(mq.queue_id)}
        lo = await self.instance.call(addr, R.GET_MIN_OFFSET, ext)
        hi = await self.instance.call(addr, R.GET_MAX_OFFSET, ext)
        return int(lo.ext["offset"]), int(hi.ext["offset"])
