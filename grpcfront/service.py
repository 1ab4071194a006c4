"""The gRPC front (issue #55, first step): RocketMQ 5.x's official clients over
``apache.rocketmq.v2.MessagingService`` (``grpcfront/v2.py``), on ``grpcListenPort``, over the same
store and roles as the 4.x readers: a send goes through this process's own ring slot to the writer
(``shm/writerlink.py``), as a reader's does, and waits for the flush under SYNC_FLUSH.

Served so far, as the 5.x proxy in cluster mode over 4.x queues: ``QueryRoute`` (a topic's queues,
this endpoint as their broker), ``Heartbeat``, the ``Telemetry`` stream's settings (a client waits
for them before it starts), ``SendMessage`` of normal and FIFO messages (the message group stored as
``__SHARDINGKEY``; ``grpcfront/convert.py``) and delay messages (a timer, delivered at its time),
``NotifyClientTermination``.  A transactional message is refused with NOT_IMPLEMENTED and stored
nowhere, as is every method not served yet (the consumer's: docs/GRPC.md).
"""
from __future__ import annotations

import asyncio
import logging
import time

import grpc
from google.protobuf.message import DecodeError

from rocketbox.grpcfront import convert, v2
from rocketbox.net.role import ServerRole
from rocketbox.shm import protocol as P
from rocketbox.shm.layout import C, S, T
from rocketbox.shm.ringclient import RingClient
from rocketbox.shm.tables import OffsetIndex, TopicIndex
from rocketbox.shm.waits import OffsetWaits
from rocketbox.shm.writerlink import WriterLink
from rocketbox.store import message, timer
from rocketbox.store.topicconfig import PERM_READ, PERM_WRITE

log = logging.getLogger("rocketbox.grpcfront")
FLUSH_TIMEOUT_S = 5.0                     # RocketMQ's syncFlushTimeout
_PERMISSION = {PERM_READ | PERM_WRITE: "READ_WRITE", PERM_READ: "READ", PERM_WRITE: "WRITE", 0: "NONE"}


class GrpcFront(ServerRole):
    def __init__(self, cfg, shared):
        super().__init__()
        self.cfg, self.sh = cfg, shared
        self.proto = v2.load()

    # ------------------------------------------------------------ life
    async def serve(self) -> None:
        self.topics = TopicIndex(self.sh.views, self.sh.control)
        self.link = WriterLink(self.cfg, self.sh, self.topics, OffsetIndex(self.sh.views, self.sh.control))
        self.flushes = OffsetWaits(self.sh, self.link.slot, self.loop, C.FLUSHED, S.FLUSH_WAIT, self.sh.flusher_waker)
        self.loop.add_reader(self.link.waker.fileno(), self._posted)
        server = grpc.aio.server()
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(v2.SERVICE, self._handlers())])
        server.add_insecure_port(f"0.0.0.0:{self.cfg.grpcListenPort}")
        await server.start()
        log.info("gRPC front (RocketMQ 5.x clients) on :%d (ring slot %d)", self.cfg.grpcListenPort, self.link.slot)
        try:
            while not self.stop_requested:
                await self.sleep(1.0)
                self._settle()                  # (nothing hangs on a lost post)
        finally:
            await server.stop(1.0)
            self.loop.remove_reader(self.link.waker.fileno())
            self.link.close()

    def _posted(self) -> None:
        self.link.waker.drain()
        self._settle()

    def _settle(self) -> None:
        self.link.on_wake()
        self.flushes.settle()

    def _handlers(self) -> dict:
        served = {"QueryRoute": self.query_route, "Heartbeat": self.heartbeat, "SendMessage": self.send_message,
                  "NotifyClientTermination": self.notify_termination}
        out = {}
        for m in self.proto.methods:
            if m.client_streaming and m.server_streaming:
                out[m.name] = grpc.stream_stream_rpc_method_handler(
                    self.telemetry if m.name == "Telemetry" else self._not_served_stream(m.name),
                    request_deserializer=m.request.FromString, response_serializer=m.response.SerializeToString)
            elif m.server_streaming:                          # ReceiveMessage
                out[m.name] = grpc.unary_stream_rpc_method_handler(
                    self._not_served_replies(m), request_deserializer=m.request.FromString,
                    response_serializer=m.response.SerializeToString)
            else:                                             # (parsed here: a bad one is answered, not logged)
                out[m.name] = grpc.unary_unary_rpc_method_handler(
                    _parsed(m.request, served.get(m.name) or self._not_served(m)),
                    response_serializer=m.response.SerializeToString)
        return out

    # ------------------------------------------------------------ answers
    def _status(self, response, code: str = "OK", why: str = "OK"):
        response.status.code = self.proto.code(code)
        response.status.message = why
        return response

    def _not_served(self, method: v2.Method):
        async def answer(_request, _context):
            return self._status(method.response(), "NOT_IMPLEMENTED", f"{method.name} is not served by this broker yet")
        return answer

    def _not_served_replies(self, method: v2.Method):
        async def answer(_request, _context):
            yield self._status(method.response(), "NOT_IMPLEMENTED", f"{method.name} is not served by this broker yet")
        return answer

    def _not_served_stream(self, name: str):
        async def answer(_requests, context):
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{name} is not served by this broker yet")
            yield                                # (an async generator)
        return answer

    async def heartbeat(self, _request, _context):
        return self._status(self.proto.HeartbeatResponse())

    async def notify_termination(self, _request, _context):
        return self._status(self.proto.NotifyClientTerminationResponse())

    async def telemetry(self, commands, _context):
        """The client's settings, answered with the broker's for it (what a client waits for before
        it starts): the largest body it may send; then each later settings sync the same way."""
        async for command in commands:
            if command.WhichOneof("command") != "settings":
                continue
            reply = self.proto.TelemetryCommand()
            reply.settings.CopyFrom(command.settings)
            reply.settings.publishing.max_body_size = self.cfg.maxMessageSize
            reply.settings.publishing.validate_message_type = False
            self._status(reply)
            yield reply

    async def query_route(self, request, _context):
        """A topic's queues (read and write ones as 4.x's route has them), this endpoint as the
        broker of all, every message type accepted (a 4.x topic has none set)."""
        response = self.proto.QueryRouteResponse()
        topic = request.topic.name
        meta = self.topics.live(topic)[1]
        if meta is None:
            return self._status(response, "TOPIC_NOT_FOUND", f"topic {topic} not found")
        reads, writes = meta[T.READ_QUEUE_NUMS], meta[T.WRITE_QUEUE_NUMS]
        for qid in range(max(reads, writes)):
            q = response.message_queues.add()
            q.topic.CopyFrom(request.topic)
            q.id = qid
            perm = meta[T.PERM] & ((PERM_READ if qid < reads else 0) | (PERM_WRITE if qid < writes else 0))
            q.permission = self.proto.enum("Permission", _PERMISSION[perm])
            q.broker.name, q.broker.id = self.cfg.brokerName, 0
            q.broker.endpoints.CopyFrom(request.endpoints)
            q.accept_message_types.extend([self.proto.enum("MessageType", t) for t in ("NORMAL", "FIFO", "DELAY")])
        return self._status(response)

    async def send_message(self, request, context):
        """Each message stored as one 4.x record, in request order, through this slot's ring; the
        reply once the writer stored them (and, under SYNC_FLUSH, flushed them)."""
        response = self.proto.SendMessageResponse()
        if not request.messages:
            return self._status(response, "BAD_REQUEST", "no message to send")
        rows, sizes, records, ids = [], [], [], []
        host = _peer(context.peer())
        born_ip, born_port, _v6 = message.pack_host(host)
        ring = self.link.ring
        for m in request.messages:
            try:
                tidx, qid = self._destination(m)
                props = message.encode_properties(convert.properties_of(m)).encode()
                tidx, topic, qid, props = self._placed(tidx, m.topic.name, qid, props)
                body = convert.body_of(m, self.cfg.maxMessageSize)
            except convert.Refused as e:
                return self._status(response, e.code, str(e))
            sp = m.system_properties
            born_ts = sp.born_timestamp.seconds * 1000 + sp.born_timestamp.nanos // 1_000_000 if sp.HasField(
                "born_timestamp") else int(time.time() * 1000)
            record = message.encode_record(topic=topic, queue_id=qid, body=body, properties=props,
                                           born_ts=born_ts, born_ip=born_ip, born_port=born_port,
                                           store_ip=ring.store_ip, store_port=ring.store_port)
            rows.append(RingClient.row(tidx, qid, 0, host, 1, self.cfg.sync_flush))
            sizes.append(len(record))
            records.append(record)
            ids.append(sp.message_id)
        results, failure = await self.link.appended(rows, sizes, records)
        if results is None:
            return self._status(response, "INTERNAL_SERVER_ERROR", f"not stored: {failure[1]}")
        for res in results:
            if res[P.RESULT_AT.status] != P.SUCCESS:
                return self._status(response, "INTERNAL_SERVER_ERROR",
                                    f"not stored (writer status {res[P.RESULT_AT.status]})")
        if self.cfg.sync_flush and not await self._flushed(max(r[P.RESULT_AT.end_offset] for r in results)):
            return self._status(response, "MASTER_PERSISTENCE_TIMEOUT", "the messages were not flushed in time")
        for res, msg_id in zip(results, ids):
            entry = response.entries.add()
            self._status(entry)
            entry.message_id, entry.offset = msg_id, res[P.RESULT_AT.queue_offset]
        return self._status(response)

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
            raise convert.Refused("NOT_IMPLEMENTED", "transactional messages are not served over gRPC by this broker "
                                                     "yet: send them with a 4.x client")
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

    async def _flushed(self, end_offset: int) -> bool:
        done: asyncio.Future = self.loop.create_future()

        def flushed(ok: bool) -> None:
            if not done.done():
                done.set_result(ok)
        self.flushes.after(end_offset, FLUSH_TIMEOUT_S, flushed)
        return bool(await done)


def _parsed(request_type, handler):
    """``handler`` of the request parsed from its bytes; bytes that are not one are answered
    INTERNAL "Invalid protobuf byte sequence", as grpc-java's marshaller (the 5.x proxy's) does."""
    async def answer(raw: bytes, context):
        try:
            request = request_type.FromString(raw)
        except DecodeError:
            await context.abort(grpc.StatusCode.INTERNAL, "Invalid protobuf byte sequence")
        return await handler(request, context)
    return answer


def _peer(peer: str) -> tuple[str, int]:
    """gRPC's ``ipv4:1.2.3.4:5678`` / ``ipv6:[::1]:5678`` as a record's born host (0.0.0.0:0 if neither)."""
    kind, _sep, rest = peer.partition(":")
    host, _sep, port = rest.rpartition(":")
    if kind not in ("ipv4", "ipv6") or not port.isdigit():
        return "0.0.0.0", 0
    return host.strip("[]"), int(port)
