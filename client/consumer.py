"""Consumers: ``PushConsumer`` (long polling, a listener per batch, CLUSTERING with
AllocateMessageQueueAveragely and offsets on the broker, or BROADCASTING with offsets in a local
file; concurrently or in order) and ``PullConsumer`` (assign, seek, pull).

A push consumer rebalances every 20 s and whenever a broker says the group changed
(NOTIFY_CONSUMER_IDS_CHANGED).  Each owned queue has one pull loop: pull (held by the broker up to
15 s), re-check tags on strings, hand the batch to the listener, move the offset; a concurrent
consumer's next pull is already out while the listener has the batch.  A batch the listener
refuses is sent back to the broker (CONSUMER_SEND_MSG_BACK), which offers it again through the
group's retry topic after a back-off, or, past ``max_reconsume_times``, keeps it in the group's
dead-letter topic; a CLUSTERING consumer subscribes to its retry topic for that.  Offsets are
committed every 5 s, when a queue is given up and at shutdown.

An orderly consumer (``orderly=True``, Java's MessageListenerOrderly) in CLUSTERING also holds
each queue's lock on the broker (LOCK_BATCH_MQ, renewed every 20 s) and consumes a queue only
while it holds it, so that two members never consume one queue at once, not even while they
rebalance: a queue given up is unlocked only after its batch in the listener is done and its
offset committed, and its next owner reads the offset once it has the lock.  A batch the listener
refuses blocks its queue and is offered again after 1 s (SUSPEND_CURRENT_QUEUE_A_MOMENT), each
message's reconsume count one more, until a message reaches ``max_reconsume_times`` (no limit by
default, as Java's): then it goes to the dead-letter topic through the retry topic.
"""
from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rocketbox.client import running
from rocketbox.client.errors import MQBrokerError, MQClientError
from rocketbox.client.instance import JSON, ClientInstance, MessageQueue, stop_tasks
from rocketbox.client.message import Message, MessageExt, decode_messages
from rocketbox.client.offsets import LocalOffsets, RemoteOffsets
from rocketbox.client.rebalance import allocate_averagely
from rocketbox.remoting.codec import Command
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.remoting.subscription import parse_expression
from rocketbox.store.javahash import string_hash

if TYPE_CHECKING:
    from rocketbox.client.producer import Producer

log = logging.getLogger("rocketbox.client")
RETRY_PREFIX = "%RETRY%"
REBALANCE_S, COMMIT_S, PULL_ERROR_DELAY_S, RETRY_DELAY_S = 20.0, 5.0, 3.0, 1.0
MASTER_CHECK_S = 3.0        # a queue read from a slave because its master was not routed: the route asked again this often
SUSPENDED_PULL_TIMEOUT_S = 30.0    # a held pull's time-out (Java's consumerTimeoutMillisWhenSuspend)
BACKOFF_MAX_S = 30.0          # a queue's pauses after failures double from PULL_ERROR_DELAY_S up to this
LOCK_S, LOCK_LIVE_S, LOCK_RETRY_S = 20.0, 30.0, 1.0    # Java's REBALANCE_LOCK_INTERVAL, REBALANCE_LOCK_MAX_LIVE_TIME
DRAIN_S = 1.0         # how long a rebalance waits for an orderly batch in the listener (Java: its consume lock)
COMMIT_OFFSET, SUSPEND, SUBSCRIPTION = 0x1, 0x2, 0x4


Listener = Callable[[list[MessageExt]], "bool | Awaitable[bool]"]


@dataclass
class PullResult:
    """What a pull found: its status, the offset to pull from next, the queue's bounds, and the
    messages (re-filtered by tag string, as Java's client does)."""
    status: str               # FOUND, NO_NEW_MSG, NO_MATCHED_MSG, OFFSET_ILLEGAL
    next_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt]
    suggest: int = 0          # the broker id the broker says to pull this queue from next (0: the master)


_STATUS: dict[int, str] = {RC.SUCCESS: "FOUND", RC.PULL_NOT_FOUND: "NO_NEW_MSG", RC.PULL_RETRY_IMMEDIATELY: "NO_MATCHED_MSG",
           RC.PULL_OFFSET_MOVED: "OFFSET_ILLEGAL"}


async def pull_queue(instance: ClientInstance, addr: str, group: str, mq: MessageQueue, offset: int, max_nums: int,
                     expr: str, tags: list[str], sub_version: int, suspend_ms: int, commit: int | None,
                     expression_type: str = "TAG") -> PullResult:
    """One PULL_MESSAGE; messages re-filtered by tag string (an SQL92 one: by the broker alone)."""
    flag = SUBSCRIPTION | (SUSPEND if suspend_ms else 0) | (COMMIT_OFFSET if commit is not None else 0)
    ext = {"consumerGroup": group, "topic": mq.topic, "queueId": str(mq.queue_id), "queueOffset": str(offset),
           "maxMsgNums": str(max_nums), "sysFlag": str(flag), "commitOffset": str(commit or 0),
           "suspendTimeoutMillis": str(suspend_ms), "subscription": expr, "subVersion": str(sub_version),
           "expressionType": expression_type}
    # a broker answers a held pull when its hold service next looks (RocketMQ's: every 5 s), so a held
    # pull may take seconds past suspend_ms: give it Java's 30 s
    timeout_s = max(suspend_ms / 1000 + instance.timeout_s, SUSPENDED_PULL_TIMEOUT_S) if suspend_ms else instance.timeout_s
    resp = await instance.call(addr, R.PULL_MESSAGE, ext, timeout_s=timeout_s, ok=tuple(_STATUS))
    msgs = decode_messages(resp.body, mq.broker_name) if resp.code == RC.SUCCESS else []
    if tags:
        msgs = [m for m in msgs if m.tags in tags]
    return PullResult(_STATUS[resp.code], int(resp.ext["nextBeginOffset"]), int(resp.ext["minOffset"]),
                      int(resp.ext["maxOffset"]), msgs, int(resp.ext.get("suggestWhichBrokerId") or 0))


def consumer_data(group: str, consume_type: str, model: str, consume_from: str,
                  subs: list[tuple[str, str, list[str], int]], sql: frozenset[str] = frozenset()) -> JSON:
    """A HeartbeatData's ConsumerData (FACTS §3.9); ``subs``: (topic, expression, tags, subVersion);
    ``sql``: the topics whose expression is SQL92."""
    return {"consumeFromWhere": consume_from, "consumeType": consume_type, "groupName": group,
            "messageModel": model, "unitMode": False,
            "subscriptionDataSet": [{"classFilterMode": False, "codeSet": [string_hash(t) for t in tags],
                                     "expressionType": "SQL92" if topic in sql else "TAG", "subString": expr,
                                     "subVersion": ver, "tagsSet": tags, "topic": topic}
                                    for topic, expr, tags, ver in subs]}


async def _master(instance: ClientInstance, mq: MessageQueue) -> str:
    """The address of ``mq``'s broker's master (KeyError when its route has none)."""
    return (await instance.route(mq.topic)).masters[mq.broker_name]


async def _admin(instance: ClientInstance, mq: MessageQueue) -> str:
    """Where ``mq``'s offsets are read and committed: its master, else its slave (KeyError: neither)."""
    return (await instance.route(mq.topic)).admin(mq.broker_name)


def _by_broker(mqs: list[MessageQueue]) -> dict[str, list[MessageQueue]]:
    out: dict[str, list[MessageQueue]] = {}
    for mq in mqs:
        out.setdefault(mq.broker_name, []).append(mq)
    return out


class PushConsumer:
    """A push consumer (Java's ``DefaultMQPushConsumer``): ``subscribe`` to topics, ``register`` a
    listener, ``await start()``; the client pulls the queues rebalancing gives this member and
    hands each batch to the listener, concurrently or (``orderly``) one batch at a time per queue
    in the queue's order. ``model`` CLUSTERING shares the queues among the group's members,
    BROADCASTING gives every member every message; ``consume_from`` says where a group with no
    committed offset starts."""

    SUBSCRIBES_RETRY = True      # a refused message comes back through the group's retry topic

    def __init__(self, group: str, namesrv: str, *, model: str = "CLUSTERING",
                 consume_from: str = "CONSUME_FROM_LAST_OFFSET", pull_batch: int = 32, suspend_ms: int = 15000,
                 offset_dir: str | None = None, orderly: bool = False, instance: ClientInstance | None = None,
                 max_reconsume_times: int = -1) -> None:
        if model not in ("CLUSTERING", "BROADCASTING"):
            raise ValueError(f"message model '{model}' is not CLUSTERING or BROADCASTING")
        self.group, self.model, self.consume_from, self.orderly = group, model, consume_from, orderly
        self.locking = orderly and model == "CLUSTERING"     # queues consumed only under the broker's lock
        self.pull_batch, self.suspend_ms = pull_batch, suspend_ms
        self.max_reconsume_times = max_reconsume_times    # -1: the group's (16), as Java's; orderly: no limit
        self.inner_producer: Producer | None = None       # for a retry the broker could not be asked for
        self.instance = instance or ClientInstance(namesrv)
        self.subs: dict[str, tuple[str, list[str], int]] = {}      # topic -> (expression, tags, subVersion)
        self.sql: set[str] = set()                                   # the topics whose expression is SQL92
        self.listener: Listener | None = None
        self.pullers: dict[MessageQueue, asyncio.Task[None]] = {}
        self.in_listener: set[asyncio.Task[Any]] = set()            # pull loops whose batch the listener has
        self.draining: dict[MessageQueue, asyncio.Task[None]] = {}   # given up, an orderly batch still in the listener
        self.locks: dict[MessageQueue, float] = {}             # queue -> when the broker last said it is ours
        self.backoff: dict[MessageQueue, float] = {}           # queue -> its last pause after a failure (_back_off)
        self.suggested: dict[MessageQueue, int] = {}           # queue -> the broker id its last pull said to read from
        self.master_checked: dict[str, float] = {}             # topic -> when its route was last asked for a master
        self.tasks: list[asyncio.Task[None]] = []
        self.wake = asyncio.Event()
        self.rebalancing = asyncio.Lock()          # one rebalance at a time (Java's is synchronized too)
        self.offsets = (LocalOffsets(offset_dir or os.path.expanduser("~/.rocketmq_offsets"), self.instance.client_id, group)
                        if model == "BROADCASTING" else RemoteOffsets(self.instance, group))
        self.process: dict[MessageQueue, running.ProcessQueue] = {}   # owned queues' batches, for running_info
        self.stats = running.ConsumeStats()
        self.started_ms = 0

    def subscribe(self, topic: str, expression: str = "*", *, sql: bool = False) -> PushConsumer:
        """Consume ``topic``'s messages that match ``expression``: tags (``"*"``, ``"TagA || TagB"``),
        or with ``sql`` an SQL92 expression over their properties (``"a > 5 AND TAGS = 'x'"``,
        Java's ``MessageSelector.bySql``; the broker needs ``enablePropertyFilter``, and ``start``
        raises MQBrokerError when a broker refuses it)."""
        if sql:
            self.subs[topic] = (expression, [], int(time.time() * 1000))
            self.sql.add(topic)
            return self
        expr, tags = parse_expression(expression)
        self.subs[topic] = (expr, tags, int(time.time() * 1000))
        self.sql.discard(topic)
        return self

    def register(self, listener: Listener) -> PushConsumer:
        """``listener(list[MessageExt]) -> bool`` (or a coroutine): True when the batch is consumed.
        An orderly consumer calls it with one queue's messages in their order, one batch at a time
        per queue; False (SUSPEND_CURRENT_QUEUE_A_MOMENT) offers the same batch again after 1 s."""
        self.listener = listener
        return self

    def consumer_data(self) -> JSON:
        """What the heartbeats say of this member (ConsumerData)."""
        return consumer_data(self.group, "CONSUME_PASSIVELY", self.model, self.consume_from,
                             [(topic, *sub) for topic, sub in sorted(self.subs.items())], frozenset(self.sql))

    def running_info(self, jstack: bool) -> bytes:
        """ConsumerRunningInfo (client/running.py), for a broker that asks on an operator's behalf.
        Listeners run on this client's event loop: its one thread is the "thread pool"."""
        data, wall, mono = self.consumer_data(), time.time(), time.monotonic()
        props = running.properties(self.instance, data, pullBatchSize=self.pull_batch,
                                   brokerSuspendMaxTimeMillis=self.suspend_ms, **{
                                       running.PROP_CONSUME_ORDERLY: self.orderly,
                                       running.PROP_THREADPOOL_CORE_SIZE: 1,
                                       running.PROP_CONSUMER_START_TIMESTAMP: self.started_ms})
        queues = {}
        for mq, pq in self.process.items():
            since = self.locks.get(mq)
            queues[mq] = pq.info(self.offsets.table.get(mq, -1), self._locked(mq),
                                 int((wall - (mono - since)) * 1000) if since is not None else 0)
        return running.encode(props, data["subscriptionDataSet"], queues,
                              {topic: self.stats.status(topic) for topic in self.subs},
                              running.stacks() if jstack else None)

    async def consume_directly(self, body: bytes, broker_name: str) -> JSON:
        """ConsumeMessageDirectlyResult of handing the one stored message in ``body`` to the
        listener now, outside its queue's turn and moving no offset (Java's consumeMessageDirectly:
        a dashboard's "resend to this consumer"); ValueError if ``body`` is not one record."""
        msgs = decode_messages(body, broker_name)
        if len(msgs) != 1:
            raise ValueError(f"{len(msgs)} messages in the body, not one")
        began, remark = time.monotonic(), None
        assert self.listener is not None                 # (a started consumer has one)
        try:
            ok = self.listener(msgs)
            if inspect.isawaitable(ok):
                ok = await ok
            result = "CR_LATER" if ok is False else "CR_SUCCESS"
        except Exception as e:
            result, remark = "CR_THROW_EXCEPTION", f"{type(e).__name__}: {e}"
        out = {"autoCommit": True, "consumeResult": result, "order": self.orderly}
        if remark is not None:
            out["remark"] = remark
        out["spentTimeMills"] = int((time.monotonic() - began) * 1000)
        return out

    async def reset_offsets(self, topic: str, table: dict[MessageQueue, int]) -> list[MessageQueue]:
        """Start each queue of ``topic`` this member owns that ``table`` has over from its offset
        there, and commit that offset (a broker asks on an operator's behalf: ``mqadmin
        resetOffsetByTime``, RESET_CONSUMER_CLIENT_OFFSET).  As Java's MQClientInstance.resetOffset:
        the queue's pull loop stops (an orderly batch in the listener has ``DRAIN_S`` to end), the
        offset is set and committed, and the queue is pulled again from it at once, its lock (if
        orderly) kept.  -> the queues reset."""
        async with self.rebalancing:
            loops = {mq: self.pullers.pop(mq) for mq in list(self.pullers) if mq.topic == topic and mq in table}
            await self._stop_loops(loops, cancel_busy=True)
            for mq in loops:
                self.offsets.update(mq, table[mq])
                await self._commit(mq)
                self.process.pop(mq, None)
                self.pullers[mq] = asyncio.get_running_loop().create_task(self._pull_loop(mq, table[mq]))
                log.info("%s reset %s to offset %d", self.instance.client_id, mq, table[mq])
        return sorted(loops, key=MessageQueue.sort_key)

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> PushConsumer:
        """Join the group and start pulling. -> self."""
        if self.listener is None or not self.subs:
            raise ValueError("subscribe to a topic and register a listener before start")
        if self.group in self.instance.consumers:
            raise ValueError(f"consumer group {self.group} already runs in this client instance")
        self.instance.consumers[self.group] = self
        self.started_ms = int(time.time() * 1000)
        if self.SUBSCRIBES_RETRY and self.model == "CLUSTERING" and not self.orderly:   # (Java's copySubscription)
            self.subs.setdefault(RETRY_PREFIX + self.group, ("*", [], self.started_ms))
        await self.instance.start()
        for topic in self.subs:
            try:
                await self.instance.route(topic, refresh=True)
            except MQClientError as e:        # not created yet: rebalance keeps asking
                log.warning("no route for %s yet: %s", topic, e)
        await self.instance.heartbeat_all()
        await self._check_sql()
        for topic in self.subs:                  # the broker makes the group's retry topic at the heartbeat
            if topic not in self.instance.routes:
                try:
                    await self.instance.route(topic, refresh=True)
                except MQClientError:
                    pass
        loop = asyncio.get_running_loop()
        self.tasks = [loop.create_task(self._rebalance_loop()), loop.create_task(self._commit_loop())]
        if self.locking:
            self.tasks.append(loop.create_task(self._lock_loop()))
        return self

    async def _check_sql(self) -> None:
        """Each SQL92 subscription put to its topic's brokers (CHECK_CLIENT_CONFIG, as Java's
        ``checkClientInBroker``): MQBrokerError, and the member leaves, when one refuses it."""
        for topic in sorted(self.sql):
            route = self.instance.routes.get(topic)
            for addr in sorted(route.masters.values()) if route is not None else ():
                body = json.dumps({"clientId": self.instance.client_id, "group": self.group, "subscriptionData": {
                    "topic": topic, "subString": self.subs[topic][0], "expressionType": "SQL92", "classFilterMode": False,
                    "tagsSet": [], "codeSet": [], "subVersion": self.subs[topic][2]}}).encode()
                try:
                    await self.instance.call(addr, R.CHECK_CLIENT_CONFIG, {}, body)
                except MQBrokerError:
                    self.instance.consumers.pop(self.group, None)
                    await self.instance.stop()
                    raise

    async def shutdown(self) -> None:
        """Stop pulling, let a batch in the listener finish, commit the offsets, unlock the
        queues, leave the group and close the connections (shared ones once unused)."""
        async with self.rebalancing:                 # (a rebalance under way finishes first)
            await stop_tasks(self.tasks)
            loops = {**self.draining, **self.pullers}
            self.pullers, self.draining = {}, {}     # (no loop owns its queue from here)
            await self._stop_loops(loops, cancel_busy=True)
            await self._commit_all()
            await self._unlock(list(self.locks))
        self.instance.consumers.pop(self.group, None)
        await self.instance.unregister(consumerGroup=self.group)
        await self.instance.stop()

    def rebalance_soon(self) -> None:
        """Rebalance now, not at the next period (the group's members changed)."""
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
        """Take the queues this member owns now, and give up the others (one rebalance at a time)."""
        async with self.rebalancing:
            await self._rebalance()

    async def _rebalance(self) -> None:
        mine = await self._owned()
        drained = [mq for mq, t in self.draining.items() if t.done()]
        for mq in drained:
            del self.draining[mq]
        dropped = {mq: self.pullers.pop(mq) for mq in list(self.pullers) if mq not in mine}
        busy = await self._stop_loops(dropped)
        self.draining.update(busy)
        await self._release([mq for mq in dropped if mq not in busy] + drained)
        for mq in sorted(mine - set(self.pullers) - set(self.draining), key=MessageQueue.sort_key):
            self.pullers[mq] = asyncio.get_running_loop().create_task(self._pull_loop(mq))

    async def _owned(self) -> set[MessageQueue]:
        """The queues this member owns now: every queue of its topics (BROADCASTING), else its share
        of them among the group's members (AllocateMessageQueueAveragely)."""
        mine: set[MessageQueue] = set()
        for topic in self.subs:
            try:
                route = await self.instance.route(topic, refresh=True)
            except MQBrokerError as e:
                if e.code != RC.TOPIC_NOT_EXIST:
                    raise
                continue             # no route (the group's retry topic while its only master is down): no queues
            queues = sorted(route.read_queues, key=MessageQueue.sort_key)
            if self.model == "BROADCASTING":
                mine.update(queues)
                continue
            # the group's members as a master knows them, else (every master down) a slave
            addr = min(route.masters.values(), default=None) or min(route.addresses(), default=None)
            if addr is None:
                continue
            resp = await self.instance.call(addr, R.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": self.group},
                                            ok=(RC.SUCCESS, RC.SYSTEM_ERROR))
            cids = [] if resp.code != RC.SUCCESS else json.loads(resp.body)["consumerIdList"]
            mine.update(allocate_averagely(self.instance.client_id, queues, cids))
        return mine

    async def _stop_loops(self, loops: dict[MessageQueue, asyncio.Task[None]],
                          cancel_busy: bool = False) -> dict[MessageQueue, asyncio.Task[None]]:
        """Stop the pull loops of queues given up; those of them still busy, by their key.  An
        orderly loop with a batch in the listener is not cancelled: it has ``DRAIN_S`` to finish
        (it stops by itself once the batch is done, no longer owning its queue), as Java waits
        for the queue's consume lock; one still busy then is left to finish (its queue's lock
        kept and renewed, the queue released at a later rebalance) or, at shutdown, cancelled."""
        busy = [t for t in loops.values() if t in self.in_listener] if self.orderly else []
        await stop_tasks([t for t in loops.values() if t not in busy])
        if busy:
            await asyncio.wait(busy, timeout=DRAIN_S)
            if cancel_busy:
                await stop_tasks(busy)
        still = {mq: t for mq, t in loops.items() if not t.done()}
        for t in still.values():
            t.add_done_callback(lambda _: self.rebalance_soon())
        return still

    async def _release(self, mqs: list[MessageQueue]) -> None:
        """Queues given up whose loops have ended: commit their offsets, forget them, unlock them."""
        for mq in mqs:
            await self._commit(mq)
            self.offsets.forget(mq)
            self.process.pop(mq, None)
            self.backoff.pop(mq, None)
            log.info("%s gave up %s", self.instance.client_id, mq)
        await self._unlock([mq for mq in mqs if mq in self.locks])

    # ------------------------------------------------------------ queue locks (orderly CLUSTERING)
    async def _lock_loop(self) -> None:
        while True:
            await asyncio.sleep(LOCK_S)
            await self._lock([*self.pullers, *self.draining])

    async def _lock_call(self, code: int, qs: list[MessageQueue]) -> Command:
        """LOCK_BATCH_MQ or UNLOCK_BATCH_MQ for ``qs`` (queues of one broker) to that broker's master."""
        addr = await _master(self.instance, qs[0])
        body = json.dumps({"consumerGroup": self.group, "clientId": self.instance.client_id,
                           "mqSet": [{"brokerName": q.broker_name, "queueId": q.queue_id, "topic": q.topic}
                                     for q in qs]}).encode()
        return await self.instance.call(addr, code, {}, body)

    async def _lock(self, mqs: list[MessageQueue]) -> None:
        """LOCK_BATCH_MQ to each queue's master: the queues it answers with are ours for
        ``LOCK_LIVE_S`` from now, the others not; a broker that cannot be asked changes nothing
        (its locks run out here on their own)."""
        for broker, qs in _by_broker(mqs).items():
            try:
                resp = await self._lock_call(R.LOCK_BATCH_MQ, qs)
                got = {MessageQueue(q["topic"], q["brokerName"], int(q["queueId"]))
                       for q in json.loads(resp.body)["lockOKMQSet"]}
            except (MQClientError, KeyError, TypeError, ValueError) as e:
                log.warning("locking %d queues of %s on %s failed: %s", len(qs), self.group, broker, e)
                continue
            now = time.monotonic()
            for mq in qs:
                if mq in got:
                    self.locks[mq] = now
                elif self.locks.pop(mq, None) is not None:
                    log.warning("%s lost the lock of %s", self.instance.client_id, mq)

    async def _unlock(self, mqs: list[MessageQueue]) -> None:
        for broker, qs in _by_broker(mqs).items():
            for mq in qs:
                self.locks.pop(mq, None)
            try:
                await self._lock_call(R.UNLOCK_BATCH_MQ, qs)
            except (MQClientError, KeyError) as e:     # the broker frees them after 60 s
                log.warning("unlocking %d queues of %s on %s failed: %s", len(qs), self.group, broker, e)

    async def _hold(self, mq: MessageQueue, me: asyncio.Task[Any] | None) -> bool:
        """True once this client holds ``mq``'s lock (at once unless orderly in CLUSTERING), False
        if the loop ``me`` no longer owns ``mq``; asks the broker again every ``LOCK_RETRY_S``."""
        while self.pullers.get(mq) is me:
            if not self.locking or self._locked(mq):
                return True
            await self._lock([mq])
            if not self._locked(mq):
                await asyncio.sleep(LOCK_RETRY_S)
        return False

    def _locked(self, mq: MessageQueue) -> bool:
        since = self.locks.get(mq)
        return since is not None and time.monotonic() - since < LOCK_LIVE_S

    async def _start_offset(self, mq: MessageQueue, addr: str) -> int:
        stored = await self.offsets.read(mq, addr)
        if stored is not None and stored >= 0:
            return stored
        if self.consume_from == "CONSUME_FROM_FIRST_OFFSET" or mq.topic.startswith("%RETRY%"):
            return 0
        resp = await self.instance.call(addr, R.GET_MAX_OFFSET, {"topic": mq.topic, "queueId": str(mq.queue_id)})
        return int(resp.ext["offset"])

    # ------------------------------------------------------------ consuming
    async def _pull_loop(self, mq: MessageQueue, offset: int | None = None) -> None:
        """Pull, consume, move on, while this loop owns ``mq`` (``pullers[mq]`` is its task), from
        ``offset`` or else where the group's offset store says to start.  A concurrent consumer
        sends its next pull as soon as a batch arrives, so the pull's round trip (or its long
        poll) runs while the listener has the batch, as Java's pulls go on while its consume
        threads work; an orderly one pulls only once its batch is consumed.  The offset moves
        only past consumed batches, so a queue given up with a pull ahead is read again from the
        last consumed one by its next owner.  A rebalance that gives the queue up also cancels
        the loop, but a cancellation can be lost (Python 3.11's ``wait_for`` drops one that
        lands as its reply arrives, which a busy loop makes likely; a listener may swallow one),
        and the loop would go on consuming a queue another member now owns: so it checks, as
        Java's ``ProcessQueue.isDropped``."""
        me = asyncio.current_task()
        pq = self.process.setdefault(mq, running.ProcessQueue())
        ahead: asyncio.Future[PullResult | None] | None = None   # the next pull, out while the listener has a batch
        try:
            while await self._hold(mq, me):          # (the offset is read once the queue is locked)
                if ahead is not None:
                    res, ahead = await ahead, None
                elif offset is None:
                    offset = await self._first_offset(mq)
                    continue                         # (pulled from once the loop still holds the queue)
                else:
                    res = await self._pull(mq, offset, pq)
                if res is None:                      # it failed, and was logged; try again
                    continue
                if self.pullers.get(mq) is not me:   # given up while the pull was out: not ours to consume
                    return
                if res.messages:
                    if not self.orderly:
                        ahead = asyncio.ensure_future(self._pull(mq, res.next_offset, pq))
                    if not await self._consume(mq, res.messages, me):
                        return
                    pq.done(res.messages)
                if res.status == "OFFSET_ILLEGAL":
                    log.warning("offset %d of %s is illegal; moving to %d", offset, mq, res.next_offset)
                offset = res.next_offset
                self.offsets.update(mq, offset)
        finally:
            if ahead is not None:
                ahead.cancel()

    async def _first_offset(self, mq: MessageQueue) -> int | None:
        """Where a loop starts on ``mq``: the group's stored offset, or where ``consume_from``
        says; None (logged, after a pause) when it cannot be asked now."""
        try:
            addr = await _admin(self.instance, mq)
            offset = await self._start_offset(mq, addr)
        except (MQClientError, KeyError) as e:
            log.warning("reading the offset of %s failed: %s", mq, e)
            await self._back_off(mq)
            return None
        self.backoff.pop(mq, None)
        self.offsets.update(mq, offset)
        return offset

    async def _refresh(self, mq: MessageQueue) -> None:
        """After a pull failed: the route again, at once (Java waits for its 30 s refresh), so a
        dead master's queues are read from its slave as soon as the name servers dropped it."""
        try:
            await self.instance.route(mq.topic, refresh=True)
        except MQClientError as e:
            log.debug("route refresh for %s failed: %s", mq.topic, e)

    async def _back_off(self, mq: MessageQueue) -> None:
        """After a failure on ``mq`` (its broker down or restarting, a reply that does not decode):
        a pause, twice the last one of this queue's failures in a row (PULL_ERROR_DELAY_S first,
        BACKOFF_MAX_S at most)."""
        last = self.backoff.get(mq)
        delay = self.backoff[mq] = PULL_ERROR_DELAY_S if last is None else min(2 * last, BACKOFF_MAX_S)
        await asyncio.sleep(delay)

    async def _pull(self, mq: MessageQueue, offset: int, pq: running.ProcessQueue) -> PullResult | None:
        """One pull of ``mq`` from ``offset`` (the committed offset riding along in CLUSTERING);
        None (logged, after a pause) when it failed.  Whatever the failure, as Java's pull
        callback's ``onException``: a reply that does not decode (a record corrupted in the
        broker's store) is logged with where it broke and asked for again, not left to end the
        loop, which would leave its queue unconsumed and nothing said."""
        expr, tags, ver = self.subs[mq.topic]
        try:
            route, wanted = await self.instance.route(mq.topic), self.suggested.get(mq, 0)
            addr, slave = route.reader(mq.broker_name, wanted)
            if slave and not wanted and time.monotonic() - self.master_checked.get(mq.topic, 0.0) >= MASTER_CHECK_S:
                self.master_checked[mq.topic] = time.monotonic()     # read from a slave for want of its master:
                route = await self.instance.route(mq.topic, refresh=True)    # back to it once it is routed again
                addr, slave = route.reader(mq.broker_name, wanted)
            # a slave does not store the committed offset riding along (4.9.8's client clears the flag)
            committed = self.offsets.table.get(mq) if self.model == "CLUSTERING" and not slave else None
            began = time.monotonic()
            pq.pulling()
            res = await pull_queue(self.instance, addr, self.group, mq, offset, self.pull_batch, expr, tags, ver,
                                   self.suspend_ms, committed if committed else None,
                                   "SQL92" if mq.topic in self.sql else "TAG")
        except (MQClientError, KeyError) as e:
            log.warning("pull from %s failed: %s", mq, e)
            await self._refresh(mq)
            await self._back_off(mq)
            return None
        except Exception:
            log.exception("pull from %s at offset %d failed; asking again after a pause", mq, offset)
            await self._back_off(mq)
            return None
        self.backoff.pop(mq, None)
        self.suggested[mq] = res.suggest
        self.stats.pulled(mq.topic, len(res.messages), (time.monotonic() - began) * 1000)
        pq.hold(res.messages)
        return res

    async def _consume(self, mq: MessageQueue, msgs: list[MessageExt], me: asyncio.Task[Any] | None) -> bool:
        """Hand ``msgs`` to the listener until it takes them (True), or until the queue is given
        up while they wait to be offered again (False).  Orderly, each offer waits for the lock.
        A concurrent CLUSTERING consumer sends a refused batch back to the broker, which offers it
        again through the group's retry topic after a back-off (``_send_back``), and moves on;
        what cannot be sent back is offered again here.  BROADCASTING drops a refused batch
        (logged), as Java's does."""
        if mq.topic.startswith(RETRY_PREFIX):
            for m in msgs:                       # a retried message shows the topic it was sent to
                m.topic = m.properties.get("RETRY_TOPIC", m.topic)
        assert me is not None and self.listener is not None
        while await self._hold(mq, me):
            self.in_listener.add(me)
            began = time.monotonic()
            try:
                ok = self.listener(msgs)
                if inspect.isawaitable(ok):
                    ok = await ok
            except Exception:
                log.exception("listener failed on %d messages of %s", len(msgs), mq)
                ok = False
            finally:
                self.in_listener.discard(me)
            self.stats.consumed(mq.topic, len(msgs), (time.monotonic() - began) * 1000, ok is not False)
            if ok is not False:
                return True
            if self.orderly:
                msgs = await self._past_limit(msgs)
                if not msgs:
                    return True
            elif self.model == "BROADCASTING":
                log.warning("%d messages of %s not consumed: dropped (BROADCASTING)", len(msgs), mq)
                return True
            else:
                msgs = [m for m in msgs if not await self._send_back(mq, m)]
                if not msgs:
                    return True
            if self.pullers.get(mq) is not me:
                break
            await asyncio.sleep(RETRY_DELAY_S)
        return False

    async def _send_back(self, mq: MessageQueue, msg: MessageExt) -> bool:
        """CONSUMER_SEND_MSG_BACK: the broker stores ``msg`` again for a later try (its retry topic
        after level 3 + reconsume times, or past the limit its dead-letter topic); False when it
        could not be asked (the message is then offered again here)."""
        try:
            addr = await _master(self.instance, mq)
            await self.instance.call(addr, R.CONSUMER_SEND_MSG_BACK, {
                "offset": str(msg.commit_log_offset), "group": self.group, "delayLevel": "0", "originMsgId": msg.msg_id,
                "originTopic": msg.topic, "unitMode": "false", "maxReconsumeTimes": str(self._limit())})
            return True
        except (MQClientError, KeyError) as e:
            log.warning("sending %s back to the broker failed (%s): sending it to the retry topic", msg.msg_id, e)
            return await self._to_retry_topic(msg, msg.reconsume_times + 1)

    def _limit(self) -> int:
        """The reconsume limit the broker is told: ``max_reconsume_times``, 16 when it is -1 (Java's)."""
        return self.max_reconsume_times if self.max_reconsume_times >= 0 else 16

    async def _past_limit(self, msgs: list[MessageExt]) -> list[MessageExt]:
        """An orderly batch the listener refused: each message is retried here, its reconsume count
        one more, until it reaches ``max_reconsume_times`` (none by default, as Java's orderly
        consumer); then it goes to the retry topic, which the broker turns into the dead-letter
        topic.  -> the messages to offer again."""
        again = []
        for m in msgs:
            if 0 <= self.max_reconsume_times <= m.reconsume_times and await self._to_retry_topic(m, m.reconsume_times):
                continue
            m.reconsume_times += 1
            again.append(m)
        return again

    async def _to_retry_topic(self, msg: MessageExt, reconsume_times: int) -> bool:
        """A copy of ``msg`` sent to ``%RETRY%<group>`` by this client itself, as Java's consumer
        does when the broker cannot take a send-back (and an orderly one at its limit): the
        broker sends it on to the dead-letter topic when ``reconsume_times`` has reached the limit."""
        from rocketbox.client.producer import Producer as InnerProducer
        if self.inner_producer is None:
            self.inner_producer = InnerProducer("CLIENT_INNER_PRODUCER", "", instance=self.instance)
        limit = self._limit()
        props = {k: v for k, v in msg.properties.items() if k != "TRAN_MSG"}
        props.setdefault("RETRY_TOPIC", msg.topic)
        props.setdefault("ORIGIN_MESSAGE_ID", msg.msg_id)
        props.update(RECONSUME_TIME=str(reconsume_times), MAX_RECONSUME_TIMES=str(limit), DELAY=str(3 + msg.reconsume_times))
        try:
            await self.inner_producer.send(Message(RETRY_PREFIX + self.group, msg.body, properties=props, flag=msg.flag))
            return True
        except MQClientError as e:
            log.warning("sending %s to the retry topic failed (%s): offered again here", msg.msg_id, e)
            return False

    # ------------------------------------------------------------ offsets
    async def _commit(self, mq: MessageQueue) -> None:
        try:
            route = await self.instance.route(mq.topic)
            await self.offsets.commit(mq, route.admin(mq.broker_name))
        except (MQClientError, KeyError) as e:
            log.warning("commit of %s failed: %s", mq, e)

    async def _commit_all(self) -> None:
        for mq in list(self.offsets.table):
            await self._commit(mq)

    async def _commit_loop(self) -> None:
        while True:
            await asyncio.sleep(COMMIT_S)
            self.stats.mark()
            await self._commit_all()


class PullConsumer:
    """Pull on your own terms: ``assign`` queues, ``seek`` to an offset, ``pull`` the next batch.

    Like Java's DefaultMQPullConsumer, it is a member of its group on the brokers it knows (a
    heartbeat with consumeType CONSUME_ACTIVELY): so the group's retry topic exists, and admin
    tools find the group (``client.admin``)."""

    def __init__(self, group: str, namesrv: str, *, instance: ClientInstance | None = None) -> None:
        self.group = group
        self.instance = instance or ClientInstance(namesrv)
        self.positions: dict[MessageQueue, int] = {}
        self.suggested: dict[MessageQueue, int] = {}           # queue -> the broker id its last pull said to read from
        self.topics: set[str] = set()

    def consumer_data(self) -> JSON:
        """What the heartbeats say of this member (ConsumerData)."""
        return consumer_data(self.group, "CONSUME_ACTIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET",
                             [(topic, "*", [], 0) for topic in sorted(self.topics)])

    def rebalance_soon(self) -> None:
        """(The group's members changed: a pull consumer chooses its queues itself.)"""

    async def consume_directly(self, _body: bytes, _broker_name: str) -> None:
        """(No listener to hand a message to: the broker is told the group is not here, as Java's.)"""

    def running_info(self, jstack: bool) -> bytes:
        """ConsumerRunningInfo: its properties, subscriptions, and each assigned queue's position."""
        data = self.consumer_data()
        return running.encode(running.properties(self.instance, data), data["subscriptionDataSet"],
                              {mq: running.ProcessQueue().info(pos, False, 0) for mq, pos in self.positions.items()},
                              {}, running.stacks() if jstack else None)

    async def start(self) -> PullConsumer:
        """Join the group on the brokers (heartbeats). -> self."""
        if self.group in self.instance.consumers:
            raise ValueError(f"consumer group {self.group} already runs in this client instance")
        self.instance.consumers[self.group] = self
        await self.instance.start()
        return self

    async def shutdown(self) -> None:
        """Leave the group and close the connections (shared ones once unused)."""
        self.instance.consumers.pop(self.group, None)
        await self.instance.unregister(consumerGroup=self.group)
        await self.instance.stop()

    async def queues(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues; the first time, the brokers also learn the group has a
        member here (a heartbeat)."""
        route = await self.instance.route(topic, refresh=True)
        if topic not in self.topics:
            self.topics.add(topic)
            await self.instance.heartbeat_all()
        return sorted(route.read_queues, key=MessageQueue.sort_key)

    async def assign(self, mqs: list[MessageQueue]) -> None:
        """Own these queues, starting from the group's committed offsets (0 where there are none)."""
        offsets = RemoteOffsets(self.instance, self.group)
        for mq in mqs:
            self.positions[mq] = await offsets.read(mq, await _admin(self.instance, mq)) or 0

    def seek(self, mq: MessageQueue, offset: int) -> None:
        """Pull ``mq`` from ``offset`` next."""
        self.positions[mq] = offset

    async def pull(self, mq: MessageQueue, max_nums: int = 32, expression: str = "*", block_ms: int = 0) -> PullResult:
        """The next batch of an assigned queue; ``block_ms`` > 0 waits for messages (long polling)."""
        expr, tags = parse_expression(expression)
        addr, _slave = (await self.instance.route(mq.topic)).reader(mq.broker_name, self.suggested.get(mq, 0))
        res = await pull_queue(self.instance, addr, self.group, mq, self.positions[mq], max_nums, expr, tags, 0,
                               block_ms, None)
        self.positions[mq] = res.next_offset
        self.suggested[mq] = res.suggest
        return res

    async def commit(self, mq: MessageQueue | None = None) -> None:
        """Store the current position(s) as the group's committed offset on the broker."""
        offsets = RemoteOffsets(self.instance, self.group)
        for q in [mq] if mq is not None else list(self.positions):
            offsets.update(q, self.positions[q])
            await offsets.commit(q, await _admin(self.instance, q))

    async def offset_bounds(self, mq: MessageQueue) -> tuple[int, int]:
        """The queue's (min, max) offsets on its broker."""
        addr, ext = await _admin(self.instance, mq), {"topic": mq.topic, "queueId": str(mq.queue_id)}
        lo = await self.instance.call(addr, R.GET_MIN_OFFSET, ext)
        hi = await self.instance.call(addr, R.GET_MAX_OFFSET, ext)
        return int(lo.ext["offset"]), int(hi.ext["offset"])
