"""The gRPC front: RocketMQ 5.x's official clients over ``apache.rocketmq.v2.MessagingService``
(``grpcfront/v2.py``), on ``grpcListenPort``, over the same store and roles as the 4.x readers (it is
a ``ReaderContext``): a send goes through this process's own ring slot to the writer
(``shm/writerlink.py``), as a reader's does, and waits for the flush under SYNC_FLUSH and for a
slave under SYNC_MASTER; a receive reads the consume queues and the CommitLog (``StoreView``).

Served, as the 5.x proxy in cluster mode over 4.x queues: ``QueryRoute`` (a topic's queues, this
endpoint as their broker), ``Heartbeat``, the ``Telemetry`` stream (settings; transaction
check-backs), ``SendMessage`` of normal and FIFO messages (the message group stored as
``__SHARDINGKEY``; ``grpcfront/convert.py``), delay messages (a timer, delivered at its time) and
transactional ones, ``EndTransaction`` (``grpcfront/transactions.py``), ``QueryAssignment``, the
consumers' ``ReceiveMessage``, ``AckMessage``, ``ChangeInvisibleDuration`` and
``ForwardMessageToDeadLetterQueue`` (``grpcfront/consume.py``), ``NotifyClientTermination``.  The
other methods are answered NOT_IMPLEMENTED (docs/GRPC.md).
"""
from __future__ import annotations

import asyncio
import logging
import time

import grpc
from google.protobuf.message import DecodeError

from rocketbox.grpcfront import consume, convert, transactions, v2
from rocketbox.grpcfront.consume import SimpleConsumers
from rocketbox.grpcfront.transactions import Transactions
from rocketbox.net.role import ServerRole
from rocketbox.shm import protocol as P
from rocketbox.shm.context import ReaderContext
from rocketbox.shm.layout import T
from rocketbox.shm.ringclient import RingClient
from rocketbox.store import message, timer, transaction
from rocketbox.store.topicconfig import PERM_READ, PERM_WRITE

log = logging.getLogger("rocketbox.grpcfront")
_PERMISSION = {PERM_READ | PERM_WRITE: "READ_WRITE", PERM_READ: "READ", PERM_WRITE: "WRITE", 0: "NONE"}


class GrpcFront(ReaderContext, ServerRole):
    def __init__(self, cfg, shared):
        ReaderContext.__init__(self, cfg, shared)
        ServerRole.__init__(self)
        self.proto = v2.load()

    # ------------------------------------------------------------ life
    async def serve(self) -> None:
        self.open_context()
        self.consumers = SimpleConsumers(self)
        self.tx = Transactions(self)
        await self.tx.start()
        server = grpc.aio.server()
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(v2.SERVICE, self._handlers())])
        server.add_insecure_port(f"0.0.0.0:{self.cfg.grpcListenPort}")
        await server.start()
        log.info("gRPC front (RocketMQ 5.x clients) on :%d (ring slot %d)", self.cfg.grpcListenPort, self.link.slot)
        try:
            while not self.stop_requested:
                await self.sleep(1.0)
                self.settle()                   # (nothing hangs on a lost post)
                self.consumers.tick()
        finally:
            await server.stop(1.0)
            await self.tx.close()
            self.consumers.close()
            self.close_context()

    def settle(self) -> None:
        """A post: the writer's replies, flushes, slaves; receives held until their queues grew."""
        super().settle()
        if hasattr(self, "consumers"):
            self.consumers.settle()

    def _handlers(self) -> dict:
        c = self.consumers
        served = {"QueryRoute": self.query_route, "Heartbeat": self.heartbeat, "SendMessage": self.send_message,
                  "NotifyClientTermination": self.notify_termination, "AckMessage": c.ack, "EndTransaction": self.tx.end,
                  "QueryAssignment": self.query_assignment,
                  "ChangeInvisibleDuration": c.change_invisible, "ForwardMessageToDeadLetterQueue": c.forward_to_dlq}
        out = {}
        for m in self.proto.methods:
            if m.client_streaming and m.server_streaming:
                out[m.name] = grpc.stream_stream_rpc_method_handler(
                    self.telemetry if m.name == "Telemetry" else self._not_served_stream(m.name),
                    request_deserializer=m.request.FromString, response_serializer=m.response.SerializeToString)
            elif m.server_streaming:                          # ReceiveMessage
                out[m.name] = grpc.unary_stream_rpc_method_handler(
                    _parsed_stream(m.request, c.receive if m.name == "ReceiveMessage" else self._not_served_replies(m)),
                    response_serializer=m.response.SerializeToString)
            else:                                             # (parsed here: a bad one is answered, not logged)
                out[m.name] = grpc.unary_unary_rpc_method_handler(
                    _parsed(m.request, served.get(m.name) or self._not_served(m)),
                    response_serializer=m.response.SerializeToString)
        return out

    # ------------------------------------------------------------ answers
    def status(self, response, code: str = "OK", why: str = "OK"):
        response.status.code = self.proto.code(code)
        response.status.message = why
        return response

    def _not_served(self, method: v2.Method):
        async def answer(_request, _context):
            return self.status(method.response(), "NOT_IMPLEMENTED", f"{method.name} is not served by this broker yet")
        return answer

    def _not_served_replies(self, method: v2.Method):
        async def answer(_request, _context):
            yield self.status(method.response(), "NOT_IMPLEMENTED", f"{method.name} is not served by this broker yet")
        return answer

    def _not_served_stream(self, name: str):
        async def answer(_requests, context):
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{name} is not served by this broker yet")
            yield                                # (an async generator)
        return answer

    async def heartbeat(self, _request, _context):
        return self.status(self.proto.HeartbeatResponse())

    async def notify_termination(self, _request, _context):
        return self.status(self.proto.NotifyClientTerminationResponse())

    async def telemetry(self, commands, context):
        """A client's Telemetry stream: each settings command answered with the broker's settings
        for it (what a client waits for before it starts), its topics kept for the transactions'
        check-back; the check-back's commands written to it as they come (``Transactions``)."""
        stream = self.tx.opened()
        client_id = dict(context.invocation_metadata() or ()).get("x-mq-client-id", "")
        peer = "%s:%d" % _peer(context.peer())

        async def write() -> None:
            while True:
                await context.write(await stream.out.get())
        writer = asyncio.ensure_future(write())
        try:
            async for command in commands:
                if command.WhichOneof("command") == "settings":
                    self.tx.settled(stream, command.settings, client_id, peer)
                    stream.out.put_nowait(self._settings_reply(command.settings))
        finally:
            writer.cancel()
            self.tx.closed(stream)

    def _settings_reply(self, asked):
        """The broker's settings for a client: a producer's largest body (``maxMessageSize``); a
        consumer's group as configured: FIFO or not (``consumeMessageOrderly``), its deliveries
        before the dead-letter queue (``retryMaxTimes`` + 1) and the 4.x delay levels between
        them, as the 5.x proxy answers."""
        reply = self.proto.TelemetryCommand()
        settings = reply.settings
        settings.CopyFrom(asked)
        settings.publishing.max_body_size = self.cfg.maxMessageSize
        settings.publishing.validate_message_type = False
        sg = self.group(asked.subscription.group.name) if asked.HasField("subscription") else None
        if sg is not None:
            sub = settings.subscription
            sub.fifo = bool(sg.get("consumeMessageOrderly", False))
            if not sub.long_polling_timeout.ToMilliseconds():        # (a push consumer asks none: it polls this long)
                sub.long_polling_timeout.FromMilliseconds(consume.DEFAULT_POLL_MS)
            if not sub.receive_batch_size:
                sub.receive_batch_size = consume.MAX_BATCH
            settings.backoff_policy.max_attempts = consume.max_deliveries(sg)
            settings.backoff_policy.customized_backoff.Clear()
            for ms in self.cfg.delay_levels_ms:
                settings.backoff_policy.customized_backoff.next.add().FromMilliseconds(ms)
        return self.status(reply)

    async def query_route(self, request, _context):
        """A topic's queues (read and write ones as 4.x's route has them), this endpoint as the
        broker of all, every message type accepted (a 4.x topic has none set)."""
        response = self.proto.QueryRouteResponse()
        topic = request.topic.name
        meta = self.topics.live(topic)[1]
        if meta is None:
            return self.status(response, "TOPIC_NOT_FOUND", f"topic {topic} not found")
        reads, writes = meta[T.READ_QUEUE_NUMS], meta[T.WRITE_QUEUE_NUMS]
        for qid in range(max(reads, writes)):
            q = self._queue(response.message_queues.add(), request, qid,
                            meta[T.PERM] & ((PERM_READ if qid < reads else 0) | (PERM_WRITE if qid < writes else 0)))
            q.accept_message_types.extend([self.proto.enum("MessageType", t) for t in ("NORMAL", "FIFO", "DELAY",
                                                                                     "TRANSACTION")])
        return self.status(response)

    async def query_assignment(self, request, _context):
        """A push consumer's queues: all of the topic's on this broker, as one assignment of queue
        -1 (a receive from it takes any readable queue), as the 5.x proxy assigns a broker's
        queues in cluster mode (pop)."""
        response = self.proto.QueryAssignmentResponse()
        topic = request.topic.name
        meta = self.topics.live(topic)[1]
        if meta is None:
            return self.status(response, "TOPIC_NOT_FOUND", f"topic {topic} not found")
        if self.group(request.group.name) is None:
            return self.status(response, "CONSUMER_GROUP_NOT_FOUND", f"consumer group {request.group.name} not found")
        if meta[T.PERM] & PERM_READ and meta[T.READ_QUEUE_NUMS]:
            self._queue(response.assignments.add().message_queue, request, -1, meta[T.PERM] & (PERM_READ | PERM_WRITE))
        return self.status(response)

    def _queue(self, q, request, qid: int, perm: int):
        """``q`` (a MessageQueue) filled in: the request's topic, queue ``qid``, its permission, this
        broker at the endpoints the client reached it by."""
        q.topic.CopyFrom(request.topic)
        q.id = qid
        q.permission = self.proto.enum("Permission", _PERMISSION[perm])
        q.broker.name, q.broker.id = self.cfg.brokerName, 0
        q.broker.endpoints.CopyFrom(request.endpoints)
        return q

    async def send_message(self, request, context):
        """Each message stored as one 4.x record, in request order, through this slot's ring; the
        reply once the writer stored them (and, under SYNC_FLUSH, flushed them)."""
        response = self.proto.SendMessageResponse()
        if not request.messages:
            return self.status(response, "BAD_REQUEST", "no message to send")
        rows, sizes, records, ids = [], [], [], []
        host = _peer(context.peer())
        born_ip, born_port, _v6 = message.pack_host(host)
        ring = self.link.ring
        halves = []
        for m in request.messages:
            try:
                tidx, qid = self._destination(m)
                if m.system_properties.message_type == self.proto.enum("MessageType", "TRANSACTION"):
                    props = self.tx.half_properties(convert.properties_of(m), m.topic.name, qid)
                    tidx, topic, qid = self._half_topic(), transaction.HALF_TOPIC_BYTES, 0
                else:
                    props = message.encode_properties(convert.properties_of(m)).encode()
                    tidx, topic, qid, props = self._placed(tidx, m.topic.name, qid, props)
                body = convert.body_of(m, self.cfg.maxMessageSize)
            except convert.Refused as e:
                return self.status(response, e.code, str(e))
            sp = m.system_properties
            born_ts = sp.born_timestamp.ToMilliseconds() if sp.HasField("born_timestamp") else int(time.time() * 1000)
            record = message.encode_record(topic=topic, queue_id=qid, body=body, properties=props,
                                           born_ts=born_ts, born_ip=born_ip, born_port=born_port,
                                           store_ip=ring.store_ip, store_port=ring.store_port)
            rows.append(RingClient.row(tidx, qid, 0, host, 1, self.sync_flush))
            sizes.append(len(record))
            records.append(record)
            ids.append(sp.message_id)
            halves.append(topic == transaction.HALF_TOPIC_BYTES)
        results, failure = await self.link.appended(rows, sizes, records)
        if results is None:
            return self.status(response, "INTERNAL_SERVER_ERROR", f"not stored: {failure[1]}")
        for res in results:
            if res[P.RESULT_AT.status] != P.SUCCESS:
                return self.status(response, "INTERNAL_SERVER_ERROR",
                                    f"not stored (writer status {res[P.RESULT_AT.status]})")
        refused = await self._durable(max(r[P.RESULT_AT.end_offset] for r in results))
        if refused is not None:
            return self.status(response, *refused)
        for res, msg_id, size, half in zip(results, ids, sizes, halves):
            entry = response.entries.add()
            self.status(entry)
            entry.message_id, entry.offset = msg_id, res[P.RESULT_AT.queue_offset]
            if half:                    # (the half's CommitLog offset: where its record ends, less its size)
                entry.transaction_id = transactions.transaction_id(res[P.RESULT_AT.end_offset] - size, entry.offset)
        return self.status(response)

    def _half_topic(self) -> int:
        tidx = self.topics.lookup(transaction.HALF_TOPIC)
        if tidx is None:
            raise convert.Refused("INTERNAL_SERVER_ERROR", f"{transaction.HALF_TOPIC} is missing from the topic table")
        return tidx

    def _destination(self, m) -> tuple[int, int]:
        """(topic index, queue id) a message goes to; Refused for one this step does not store."""
        topic = m.topic.name
        tidx, meta = self.topics.live(topic)
        if meta is None:
            raise convert.Refused("TOPIC_NOT_FOUND", f"topic {topic} not found")
        if not meta[T.PERM] & PERM_WRITE:
            raise convert.Refused("FORBIDDEN", f"the topic[{topic}] sending message is forbidden")
        sp = m.system_properties
        if sp.message_type == self.proto.enum("MessageType", "TRANSACTION"):
            if self.cfg.rejectTransactionMessage:
                raise convert.Refused("FORBIDDEN", "this broker takes no transactional message (rejectTransactionMessage)")
            if sp.HasField("delivery_timestamp") or (sp.HasField("message_group") and sp.message_group):
                raise convert.Refused("MESSAGE_PROPERTY_CONFLICT_WITH_TYPE", "a transactional message has no delivery "
                                                                             "time and no message group")
        qid = sp.queue_id
        if not 0 <= qid < meta[T.WRITE_QUEUE_NUMS]:
            raise convert.Refused("BAD_REQUEST", f"queue {qid} of topic {topic} does not take messages")
        assert tidx is not None
        return tidx, qid

    def _placed(self, tidx: int, topic: str, qid: int, props: bytes) -> tuple[int, bytes, int, bytes]:
        """Where a message is stored: as sent, or, with a delivery time later than now, in the
        timer queue with its real topic and queue in its properties, as a 4.x reader stores a
        timer (``store/timer.py``).  -> (topic index, topic bytes, queue id, properties)."""
        now = int(time.time() * 1000)
        try:
            when = timer.deliver_ms(props, now, self.cfg.timerMaxDelaySec * 1000)
        except ValueError as e:
            raise convert.Refused("ILLEGAL_DELIVERY_TIME", str(e)) from None
        if when is None or when <= now:
            return tidx, topic.encode(), qid, props                      # due already: stored as sent
        timers = self.topics.lookup(timer.TIMER_TOPIC)
        if timers is None:
            raise convert.Refused("INTERNAL_SERVER_ERROR", f"{timer.TIMER_TOPIC} is missing from the topic table")
        return timers, timer.TIMER_TOPIC_BYTES, 0, timer.timer_properties(props, when, topic, qid)

    async def _durable(self, end_offset: int) -> tuple[str, str] | None:
        """Under SYNC_FLUSH, the CommitLog on disk through ``end_offset``; under SYNC_MASTER, a
        slave has it too (none connected, or the nearest too far behind: at once refused, as
        4.9.8) -> None, else the 5.x code and why, as the proxy maps 4.x's FLUSH_DISK_TIMEOUT,
        SLAVE_NOT_AVAILABLE and FLUSH_SLAVE_TIMEOUT."""
        if self.sync_flush and not await _waited(self.flushes, end_offset, self.flush_timeout_s, self.loop):
            return "MASTER_PERSISTENCE_TIMEOUT", "the messages were not flushed in time"
        if self.sync_master:
            if self.slave_unavailable(end_offset):
                return "HA_NOT_AVAILABLE", "no slave has caught up to take the messages"
            if not await _waited(self.replicas, end_offset, self.slave_timeout_s, self.loop):
                return "SLAVE_PERSISTENCE_TIMEOUT", "no slave had the messages in time"
        return None


async def _waited(waits, end_offset: int, timeout_s: float, loop) -> bool:
    """``OffsetWaits.after`` awaited: True once the offset reached ``end_offset``, False at the time-out."""
    done: asyncio.Future = loop.create_future()

    def reached(ok: bool) -> None:
        if not done.done():
            done.set_result(ok)
    waits.after(end_offset, timeout_s, reached)
    return bool(await done)


async def _parse(request_type, raw: bytes, context):
    """The request parsed from its bytes; bytes that are not one are answered INTERNAL "Invalid
    protobuf byte sequence", as grpc-java's marshaller (the 5.x proxy's) does."""
    try:
        return request_type.FromString(raw)
    except DecodeError:
        await context.abort(grpc.StatusCode.INTERNAL, "Invalid protobuf byte sequence")


def _parsed(request_type, handler):
    """``handler`` of the request ``_parse`` gives (a method answered once)."""
    async def answer(raw: bytes, context):
        return await handler(await _parse(request_type, raw, context), context)
    return answer


def _parsed_stream(request_type, handler):
    """``_parsed`` for a method that answers with a stream (``ReceiveMessage``)."""
    async def answer(raw: bytes, context):
        async for reply in handler(await _parse(request_type, raw, context), context):
            yield reply
    return answer


def _peer(peer: str) -> tuple[str, int]:
    """gRPC's ``ipv4:1.2.3.4:5678`` / ``ipv6:[::1]:5678`` as a record's born host (0.0.0.0:0 if neither)."""
    kind, _sep, rest = peer.partition(":")
    host, _sep, port = rest.rpartition(":")
    if kind not in ("ipv4", "ipv6") or not port.isdigit():
        return "0.0.0.0", 0
    return host.strip("[]"), int(port)
