"""The producer (Java's DefaultMQProducer): sync, async (a task) and oneway sends, batches, retries
on another broker, and a queue selector for ordered sends.

Queue choice: round-robin over the topic's write queues; a retry skips the broker that just failed
when another has queues.  A topic the name servers do not know is sent with TBW102's route and
``defaultTopic=TBW102`` so a broker with ``autoCreateTopicEnable`` creates it (as Java does).
"""
from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import Any

from rocketbox.client.errors import MQBrokerError, MQClientError
from rocketbox.client.instance import ClientInstance, MessageQueue, TopicRoute
from rocketbox.client.message import Message, MessageExt, SendResult
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.store import message as codec

DEFAULT_TOPIC = "TBW102"
Selector = Callable[[list[MessageQueue], Message, Any], MessageQueue]
STATUS: dict[int, str] = {RC.SUCCESS: "SEND_OK", RC.FLUSH_DISK_TIMEOUT: "FLUSH_DISK_TIMEOUT",
          RC.FLUSH_SLAVE_TIMEOUT: "FLUSH_SLAVE_TIMEOUT", RC.SLAVE_NOT_AVAILABLE: "SLAVE_NOT_AVAILABLE"}


class Producer:
    """A producer (Java's ``DefaultMQProducer``) of ``group``, finding brokers through the name
    servers ``namesrv`` ("host:port;host:port"). ``await start()`` before sending (or ``async
    with``); a send that fails on a broker is tried ``retries`` more times on another."""

    def __init__(self, group: str, namesrv: str, *, send_timeout_s: float = 3.0, retries: int = 2,
                 default_topic_queue_nums: int = 4, instance: ClientInstance | None = None) -> None:
        self.group, self.timeout_s, self.retries = group, send_timeout_s, retries
        self.default_queue_nums = default_topic_queue_nums
        self.instance = instance or ClientInstance(namesrv, send_timeout_s)
        self.rr = itertools.count()
        self.in_flight: set[asyncio.Task[SendResult]] = set()     # send_async's tasks not done yet

    async def start(self) -> Producer:
        """Connect (lazily) and start the heartbeats. -> self."""
        self.instance.producers.add(self.group)
        await self.instance.start()
        return self

    async def shutdown(self) -> None:
        """Wait for the sends still in flight (``send_async``'s), then unregister from the brokers
        and close the connections (shared ones once unused)."""
        if self.in_flight:
            await asyncio.wait(self.in_flight)
        self.instance.producers.discard(self.group)
        await self.instance.unregister(producerGroup=self.group)
        await self.instance.stop()

    async def __aenter__(self) -> Producer:
        return await self.start()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.shutdown()

    # ------------------------------------------------------------ routes and queues
    async def _route(self, topic: str) -> tuple[TopicRoute, bool]:
        """-> (route, via_default): a new topic goes through TBW102's queues."""
        try:
            route = await self.instance.route(topic)
            if route.write_queues:
                return route, False
        except MQBrokerError as e:
            if e.code != RC.TOPIC_NOT_EXIST:
                raise
        base = await self.instance.route(DEFAULT_TOPIC)
        route = TopicRoute(topic, {})
        route.masters = dict(base.masters)
        per_broker: dict[str, int] = {}
        for q in base.write_queues:
            per_broker[q.broker_name] = per_broker.get(q.broker_name, 0) + 1
        route.write_queues = [MessageQueue(topic, b, i) for b, n in per_broker.items()
                              for i in range(min(n, self.default_queue_nums))]
        if not route.write_queues:
            raise MQClientError(f"no route for topic {topic}, and {DEFAULT_TOPIC} has no writable queue")
        return route, True

    def _pick(self, route: TopicRoute, avoid: str | None) -> MessageQueue:
        queues = route.write_queues
        n = next(self.rr)
        if avoid is not None:
            others = [q for q in queues if q.broker_name != avoid]
            if others:
                return others[n % len(others)]
        return queues[n % len(queues)]

    # ------------------------------------------------------------ sends
    async def send(self, msg: Message, *, queue: MessageQueue | None = None, selector: Selector | None = None,
                   arg: Any = None) -> SendResult:
        """Send and wait for the broker.  ``selector(queues, msg, arg) -> queue`` picks the queue for
        ordered sends (no retry on another queue then, as Java)."""
        if selector is not None:
            route, _ = await self._route(msg.topic)
            queue = selector(route.write_queues, msg, arg)
        return _stored(await self._send(msg.topic, msg.wire_properties(), msg.body, msg.flag, False, queue,
                                        oneway=False))

    def send_async(self, msg: Message, *, queue: MessageQueue | None = None, selector: Selector | None = None,
                   arg: Any = None) -> asyncio.Task[SendResult]:
        """``send`` as a task of the running loop (``shutdown`` waits for it)."""
        task = asyncio.get_running_loop().create_task(self.send(msg, queue=queue, selector=selector, arg=arg))
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)
        return task

    async def send_oneway(self, msg: Message, *, queue: MessageQueue | None = None) -> None:
        """Send without waiting for an answer (none comes)."""
        await self._send(msg.topic, msg.wire_properties(), msg.body, msg.flag, False, queue, oneway=True)

    async def request(self, msg: Message, timeout_s: float = 3.0) -> MessageExt:
        """Send ``msg`` as a request and wait for its reply (Java's ``request``, RocketMQ 4.6+): a
        responder consuming the topic answers with ``create_reply``; the broker pushes the reply
        to this client. MQClientError when none comes within ``timeout_s``."""
        props = msg.wire_properties()
        correlation = uuid.uuid4().hex
        props.update(CORRELATION_ID=correlation, REPLY_TO_CLIENT=self.instance.client_id,
                     TTL=str(int(timeout_s * 1000)))
        reply: asyncio.Future[MessageExt] = asyncio.get_running_loop().create_future()
        self.instance.replies[correlation] = reply
        try:
            await self._send(msg.topic, props, msg.body, msg.flag, False, None, oneway=False)
            return await asyncio.wait_for(reply, timeout_s)
        except asyncio.TimeoutError:
            raise MQClientError(f"no reply to request {correlation} on {msg.topic} within {timeout_s} s") from None
        finally:
            self.instance.replies.pop(correlation, None)

    async def send_batch(self, msgs: list[Message], *, queue: MessageQueue | None = None) -> SendResult:
        """One SEND_BATCH_MESSAGE: same topic, no delay (FACTS §4.2)."""
        if not msgs:
            raise ValueError("empty batch")
        topic = msgs[0].topic
        if any(m.topic != topic for m in msgs) or any(m.delay_level for m in msgs):
            raise ValueError("a batch needs one topic and no delayed messages")
        props = [m.wire_properties() for m in msgs]
        body = codec.encode_client_batch([(m.flag, m.body, codec.encode_properties(p)) for m, p in zip(msgs, props)])
        ids = ",".join(p["UNIQ_KEY"] for p in props)
        return _stored(await self._send(topic, {}, body, 0, True, queue, oneway=False, ids=ids))

    async def _send(self, topic: str, props: dict[str, str], body: bytes, flag: int, batch: bool,
                    queue: MessageQueue | None, oneway: bool, ids: str | None = None,
                    sys_flag: int = 0) -> SendResult | None:
        """``ids``: the SendResult's msgId (a batch's, comma-joined); default the UNIQ_KEY in ``props``.
        ``sys_flag``: the header's (a half message's is TRANSACTION_PREPARED, as Java's)."""
        ids = props.get("UNIQ_KEY", "") if ids is None else ids
        route, via_default = await self._route(topic)
        avoid: str | None = None
        last: MQClientError | None = None
        tries = 1 if (queue is not None or oneway) else 1 + self.retries
        for _ in range(tries):
            mq = queue or self._pick(route, avoid)
            addr = route.masters.get(mq.broker_name)
            if addr is None:
                raise MQClientError(f"no master address for broker {mq.broker_name}")
            ext = {"a": self.group, "b": topic, "c": DEFAULT_TOPIC, "d": str(self.default_queue_nums),
                   "e": str(mq.queue_id), "f": str(sys_flag), "g": str(int(time.time() * 1000)), "h": str(flag),
                   "i": codec.encode_properties(props), "j": "0", "k": "false", "m": "true" if batch else "false"}
            if topic.startswith("%RETRY%"):      # a consumer's own retry: its counts ride in the header, as Java's
                ext["j"] = props.get("RECONSUME_TIME", "0")
                if "MAX_RECONSUME_TIMES" in props:
                    ext["l"] = props["MAX_RECONSUME_TIMES"]
            code = R.SEND_BATCH_MESSAGE if batch else R.SEND_REPLY_MESSAGE_V2 if props.get("MSG_TYPE") == "reply" \
                else R.SEND_MESSAGE_V2
            try:
                if oneway:
                    await self.instance.oneway(addr, code, ext, body)
                    return None
                resp = await self.instance.invoke(addr, code, ext, body, self.timeout_s)
                if resp.code not in STATUS:
                    raise MQBrokerError(resp.code, resp.remark, addr)
            except MQClientError as e:
                e.may_be_stored = e.may_be_stored or (last is not None and last.may_be_stored)   # earlier tries count
                last, avoid = e, mq.broker_name
                if not e.retriable:
                    raise
                if via_default is False and isinstance(e, MQBrokerError) and e.code == RC.TOPIC_NOT_EXIST:
                    route, via_default = await self._route(topic)
                continue
            if via_default:
                self.instance.routes.pop(topic, None)      # the broker has the topic now: re-read its route
            return SendResult(STATUS[resp.code], ids, resp.ext.get("msgId", ""), mq, int(resp.ext.get("queueOffset", -1)))
        assert last is not None            # every try failed
        raise last


def create_reply(request: MessageExt, body: bytes) -> Message:
    """The reply to ``request`` (a message a responder consumed), to send with ``Producer.send``
    (Java's ``MessageUtil.createReplyMessage``): to the request's cluster's reply topic, with its
    CORRELATION_ID, REPLY_TO_CLIENT and TTL, marked a reply."""
    p = request.properties
    cluster = p.get("CLUSTER")
    if not cluster or "REPLY_TO_CLIENT" not in p or "CORRELATION_ID" not in p:
        raise MQClientError(f"message {request.msg_id} is not a request (no CLUSTER, REPLY_TO_CLIENT or CORRELATION_ID)")
    return Message(f"{cluster}_REPLY_TOPIC", body, properties={
        "CORRELATION_ID": p["CORRELATION_ID"], "REPLY_TO_CLIENT": p["REPLY_TO_CLIENT"], "TTL": p.get("TTL", "3000"),
        "MSG_TYPE": "reply"})


def _stored(result: SendResult | None) -> SendResult:
    """A send that waits has a result (only a oneway send has none)."""
    assert result is not None
    return result
