"""A consumer's running info (common:protocol/body/ConsumerRunningInfo.java): what a push consumer
tells a broker that asks (GET_CONSUMER_RUNNING_INFO, which the broker forwards from ``mqadmin
consumerStatus`` or a dashboard), and what ``Admin.consumer_running_info`` reads back.

The body holds the consumer's properties (strings), its subscriptions, each queue it owns with
the state of its pulled batch (``mqTable``, keyed by MessageQueue in fastjson's object-key form:
``remoting.mqtable``), and per topic its pull and consume rates (``statusTable``).  The rates are
Java's ConsumerStatsManager's: over the last minute, pull RT per pull and consume RT per batch in
ms, messages per second pulled, consumed and failed; failed messages over the last hour.
"""
from __future__ import annotations

import asyncio
import collections
import io
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rocketbox.client.instance import JSON, ClientInstance, MessageQueue
from rocketbox.remoting import mqtable
from rocketbox.remoting.codes import SERVER_VERSION_DESC

if TYPE_CHECKING:
    from rocketbox.client.message import MessageExt

# property keys (ConsumerRunningInfo.PROP_*)
PROP_NAMESERVER_ADDR, PROP_THREADPOOL_CORE_SIZE = "PROP_NAMESERVER_ADDR", "PROP_THREADPOOL_CORE_SIZE"
PROP_CONSUME_ORDERLY, PROP_CONSUME_TYPE = "PROP_CONSUMEORDERLY", "PROP_CONSUME_TYPE"
PROP_CLIENT_VERSION, PROP_CONSUMER_START_TIMESTAMP = "PROP_CLIENT_VERSION", "PROP_CONSUMER_START_TIMESTAMP"
MARK_S, MINUTE_S, HOUR_S = 10.0, 60.0, 3600.0
PULLS, PULL_MS, PULLED, BATCHES, CONSUME_MS, OK, FAILED = range(7)     # a topic's counters


class ConsumeStats:
    """One consumer group's pull and consume counters per topic, with a snapshot of them every
    ``MARK_S`` (at most an hour's), from which ``status`` takes the last minute and hour."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.counts: dict[str, list[float]] = {}
        self.marks: collections.deque[tuple[float, dict[str, list[float]]]] = collections.deque()
        self.mark()

    def _topic(self, topic: str) -> list[float]:
        got = self.counts.get(topic)
        if got is None:
            got = self.counts[topic] = [0.0] * 7
        return got

    def pulled(self, topic: str, n: int, rt_ms: float) -> None:
        c = self._topic(topic)
        c[PULLS] += 1
        c[PULL_MS] += rt_ms
        c[PULLED] += n

    def consumed(self, topic: str, n: int, rt_ms: float, ok: bool) -> None:
        c = self._topic(topic)
        c[BATCHES] += 1
        c[CONSUME_MS] += rt_ms
        c[OK if ok else FAILED] += n

    def mark(self) -> None:
        """Keep a snapshot if the last is ``MARK_S`` old (called every few seconds and on each ask)."""
        now = self.clock()
        if self.marks and now - self.marks[-1][0] < MARK_S:
            return
        self.marks.append((now, {t: list(c) for t, c in self.counts.items()}))
        while len(self.marks) > 2 and now - self.marks[1][0] >= HOUR_S:
            self.marks.popleft()

    def _since(self, seconds: float) -> tuple[float, dict[str, list[float]]]:
        """The newest snapshot at least ``seconds`` old, else the oldest."""
        now, best = self.clock(), self.marks[0]
        for mark in self.marks:
            if now - mark[0] < seconds:
                break
            best = mark
        return best

    def status(self, topic: str) -> JSON:
        """ConsumeStatus of ``topic``."""
        self.mark()
        now, c = self.clock(), self.counts.get(topic) or [0.0] * 7
        t0, then = self._since(MINUTE_S)
        d = [a - b for a, b in zip(c, then.get(topic) or [0.0] * 7)]
        secs = max(now - t0, 1e-9)
        hour = self._since(HOUR_S)[1].get(topic) or [0.0] * 7
        return {"consumeFailedMsgs": int(c[FAILED] - hour[FAILED]),
                "consumeFailedTPS": d[FAILED] / secs, "consumeOKTPS": d[OK] / secs,
                "consumeRT": d[CONSUME_MS] / d[BATCHES] if d[BATCHES] else 0.0,
                "pullRT": d[PULL_MS] / d[PULLS] if d[PULLS] else 0.0, "pullTPS": d[PULLED] / secs}


@dataclass
class ProcessQueue:
    """One owned queue's state as ProcessQueueInfo reports it: the messages pulled and not yet
    consumed (the batch in the listener and, for a concurrent consumer, the one pulled ahead),
    and when it last sent a pull and consumed."""
    offsets: list[int] = field(default_factory=list)
    size: int = 0                   # bytes of the held batch's bodies
    last_pull_ms: int = 0
    last_consume_ms: int = 0

    def pulling(self) -> None:
        """A pull goes out (Java stamps lastPullTimestamp then, a long poll's wait included)."""
        self.last_pull_ms = int(time.time() * 1000)

    def hold(self, msgs: Sequence[MessageExt]) -> None:
        """A pull brought ``msgs``: held until consumed."""
        self.offsets += [m.queue_offset for m in msgs]
        self.size += sum(len(m.body) for m in msgs)

    def done(self, msgs: Sequence[MessageExt]) -> None:
        """``msgs``, the oldest batch held, are consumed."""
        del self.offsets[:len(msgs)]
        self.size -= sum(len(m.body) for m in msgs)
        self.last_consume_ms = int(time.time() * 1000)

    def info(self, commit_offset: int, locked: bool, lock_ms: int) -> JSON:
        return {"cachedMsgCount": len(self.offsets), "cachedMsgMaxOffset": max(self.offsets, default=0),
                "cachedMsgMinOffset": min(self.offsets, default=0), "cachedMsgSizeInMiB": self.size >> 20,
                "commitOffset": commit_offset, "droped": False, "lastConsumeTimestamp": self.last_consume_ms,
                "lastLockTimestamp": lock_ms, "lastPullTimestamp": self.last_pull_ms, "locked": locked,
                "transactionMsgCount": 0, "transactionMsgMaxOffset": 0, "transactionMsgMinOffset": 0,
                "tryUnlockTimes": 0}


def stacks() -> str:
    """This process's threads and asyncio tasks, as a jstack of it (jstackEnable)."""
    out = io.StringIO()
    for tid, frame in sys._current_frames().items():
        out.write(f"Thread {tid} (most recent call last):\n{''.join(traceback.format_stack(frame))}\n")
    try:
        tasks = asyncio.all_tasks()
    except RuntimeError:                # (no event loop runs in this thread)
        tasks = set()
    for task in tasks:
        task.print_stack(file=out)
    return out.getvalue()


def properties(instance: ClientInstance, data: JSON, **extra: object) -> dict[str, str]:
    """A consumer's properties: from its ConsumerData ``data``, its client ``instance``, and
    ``extra`` (made strings, as Java's MixAll.object2Properties makes them)."""
    ip, _, name = instance.client_id.partition("@")
    props = {"consumerGroup": data["groupName"], "messageModel": data["messageModel"],
             "consumeFromWhere": data["consumeFromWhere"], "unitMode": "false", "clientIP": ip,
             "instanceName": name, "namesrvAddr": ";".join(instance.namesrv),
             PROP_NAMESERVER_ADDR: "".join(a + ";" for a in instance.namesrv),
             PROP_CONSUME_TYPE: data["consumeType"], PROP_CLIENT_VERSION: SERVER_VERSION_DESC}
    props.update((k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in extra.items())
    return dict(sorted(props.items()))


def encode(properties: dict[str, str], subscriptions: list[JSON], queues: dict[MessageQueue, JSON],
           status: dict[str, JSON], jstack: str | None = None) -> bytes:
    """The ConsumerRunningInfo body, as fastjson writes it."""
    fields: JSON = {"properties": properties, "statusTable": dict(sorted(status.items())),
              "subscriptionSet": sorted(subscriptions, key=lambda s: s["topic"])}
    if jstack is not None:
        fields["jstack"] = jstack
    return mqtable.encode(fields, "mqTable", {(q.topic, q.broker_name, q.queue_id): v for q, v in queues.items()})


@dataclass(frozen=True)
class RunningInfo:
    properties: dict[str, str]
    subscriptions: list[JSON]                    # SubscriptionData, as the consumer sent them
    queues: dict[MessageQueue, JSON]             # ProcessQueueInfo by queue
    status: dict[str, JSON]                      # ConsumeStatus by topic
    jstack: str | None

    @property
    def push(self) -> bool:
        return self.properties.get(PROP_CONSUME_TYPE) == "CONSUME_PASSIVELY"

    @property
    def orderly(self) -> bool:
        return self.properties.get(PROP_CONSUME_ORDERLY, "").lower() == "true"

    def problems(self, client_id: str, now_ms: int | None = None) -> list[str]:
        """What ConsumerRunningInfo.analyzeProcessQueue finds wrong with a push consumer's queues."""
        now_ms = now_ms or int(time.time() * 1000)
        out = []
        for mq, pq in self.queues.items() if self.push else ():
            where = f"{client_id} MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]"
            if self.orderly and not pq.get("locked"):
                out.append(f"{where} can't lock for a while, {now_ms - int(pq.get('lastLockTimestamp', 0))}ms")
            elif not self.orderly and now_ms - int(pq.get("lastConsumeTimestamp", 0)) > 60_000 \
                    and int(pq.get("cachedMsgCount", 0)) > 0:
                out.append(f"{where} can't consume for a while, maybe blocked, "
                           f"{now_ms - int(pq.get('lastConsumeTimestamp', 0))}ms")
        return out


def decode(body: bytes) -> RunningInfo:
    """A ConsumerRunningInfo body (Java's, the C++ client's or ours); ValueError if it is not one."""
    fields, table = mqtable.decode(body, "mqTable")
    props = fields.get("properties") or {}
    if not isinstance(props, dict):
        raise ValueError(f"not a ConsumerRunningInfo body: properties is {type(props).__name__}")
    return RunningInfo({str(k): str(v) for k, v in props.items()}, list(fields.get("subscriptionSet") or ()),
                       {MessageQueue(t, b, q): v for (t, b, q), v in sorted(table.items())},
                       dict(fields.get("statusTable") or {}), fields.get("jstack") or None)
