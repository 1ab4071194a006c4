"""What producers and consumers of one process share (Java's MQClientInstance): the client id,
one connection per broker or name server address, topic routes from the name servers, heartbeats
to every broker every 30 s, and the broker's requests: NOTIFY_CONSUMER_IDS_CHANGED (-> rebalance),
GET_CONSUMER_RUNNING_INFO (answered with the consumer's ``running_info``; client/running.py),
CONSUME_MESSAGE_DIRECTLY (the consumer's ``consume_directly``) and CHECK_TRANSACTION_STATE (the
transactional producer's check, client/transaction.py).
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
import zlib
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, NamedTuple, Protocol

from rocketbox.client.errors import MQBrokerError, MQClientError
from rocketbox.client.message import MessageExt, decode_messages
from rocketbox.net import client as net
from rocketbox.remoting import mqtable
from rocketbox.remoting.codec import Command
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.store.configfile import loads_tolerant
from rocketbox.store.message import COMPRESSED, parse_properties

log = logging.getLogger("rocketbox.client")
PERM_WRITE, PERM_READ = 2, 4
HEARTBEAT_S = 30.0


JSON = dict[str, Any]


class MessageQueue(NamedTuple):
    """One queue of a topic on one broker (Java's ``MessageQueue``)."""
    topic: str
    broker_name: str
    queue_id: int

    def sort_key(self) -> tuple[bytes, bytes, int]:
        """The order Java sorts queues in (strings by UTF-16 code units)."""
        return (self.topic.encode("utf-16-be"), self.broker_name.encode("utf-16-be"), self.queue_id)


class TopicRoute:
    """GET_ROUTEINFO_BY_TOPIC's TopicRouteData, as queues and broker addresses: a broker's queues
    are written through its master, and read from any of its brokers (its slave while the master
    is down, as Java's ``topicRouteData2TopicSubscribeInfo``)."""

    def __init__(self, topic: str, data: JSON):
        self.topic = topic
        self.brokers: dict[str, dict[int, str]] = {}      # broker name -> {broker id: address}
        for bd in data.get("brokerDatas") or []:
            addrs = {int(k): v for k, v in (bd.get("brokerAddrs") or {}).items()}
            if addrs:
                self.brokers[bd["brokerName"]] = dict(sorted(addrs.items()))
        self.masters: dict[str, str] = {name: addrs[0] for name, addrs in self.brokers.items() if 0 in addrs}
        self.write_queues: list[MessageQueue] = []
        self.read_queues: list[MessageQueue] = []
        for qd in sorted(data.get("queueDatas") or [], key=lambda q: q["brokerName"]):
            name = qd["brokerName"]
            if qd.get("perm", 6) & PERM_WRITE and name in self.masters:
                self.write_queues += [MessageQueue(topic, name, i) for i in range(qd["writeQueueNums"])]
            if qd.get("perm", 6) & PERM_READ and name in self.brokers:
                self.read_queues += [MessageQueue(topic, name, i) for i in range(qd["readQueueNums"])]

    def reader(self, name: str, broker_id: int) -> tuple[str, bool]:
        """Where to pull a queue of broker ``name`` that was told to read from ``broker_id``, as
        Java's ``findBrokerAddressInSubscribe``: that broker, else (a slave asked) the next id,
        else any of its brokers -> (address, whether it is a slave).  KeyError when none is known."""
        addrs = self.brokers[name]
        for bid in (broker_id, broker_id + 1) if broker_id else (broker_id,):
            if bid in addrs:
                return addrs[bid], bid != 0
        bid, addr = next(iter(addrs.items()))
        return addr, bid != 0

    def addresses(self) -> set[str]:
        """Every broker's address, masters and slaves."""
        return {a for addrs in self.brokers.values() for a in addrs.values()}

    def admin(self, name: str) -> str:
        """Where offsets of broker ``name``'s queues go: its master, else any of its brokers (Java's
        ``findBrokerAddressInAdmin``).  KeyError when none is known."""
        return self.masters.get(name) or next(iter(self.brokers[name].values()))


class GroupMember(Protocol):
    """A consumer, as the client instance (heartbeats, a broker's requests) sees it."""

    def consumer_data(self) -> JSON: ...

    def rebalance_soon(self) -> None: ...

    def running_info(self, jstack: bool) -> bytes: ...

    async def consume_directly(self, body: bytes, broker_name: str) -> JSON | None: ...


async def stop_tasks(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel ``tasks`` and wait until every one has ended.  Cancelled again while any runs on:
    Python 3.11's ``asyncio.wait_for`` can swallow a cancellation that lands as its awaited
    reply arrives (fixed in 3.12), and a loop around it then never stops."""
    while tasks := [t for t in tasks if not t.done()]:
        for t in tasks:
            t.cancel()
        await asyncio.wait(tasks, timeout=1.0)


def _no_group(cmd: Command) -> Command:
    """The answer to a broker that asks a consumer group this client does not run (Java's words)."""
    return cmd.response(RC.SYSTEM_ERROR, f"The Consumer Group <{cmd.ext.get('consumerGroup', '')}> not exist "
                                         f"in this consumer")


def reset_offset_table(body: bytes) -> dict[MessageQueue, int]:
    """A ResetOffsetBody's offsetTable, keyed by MessageQueue object literals (``remoting.mqtable``),
    or in ResetOffsetBodyForC's list form; ValueError for anything else."""
    try:
        rows = json.loads(body).get("offsetTable")
    except (ValueError, AttributeError):
        rows = None
    try:
        if isinstance(rows, list):
            return {MessageQueue(r["topic"], r["brokerName"], int(r["queueId"])): int(r["offset"]) for r in rows}
        return {MessageQueue(*key): int(offset) for key, offset in mqtable.decode(body, "offsetTable")[1].items()}
    except (KeyError, TypeError) as e:
        raise ValueError(f"not an offset table: {e!r}") from None


def _local_ip() -> str:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            return str(s.getsockname()[0])
    except OSError:
        return "127.0.0.1"


class ClientInstance:
    """What the producers and consumers of one process share (Java's ``MQClientInstance``): the
    connections to the name servers and brokers, the routes, the heartbeats, and the answers to a
    broker's requests."""

    def __init__(self, namesrv: str, timeout_s: float = 3.0, instance_name: str | None = None) -> None:
        self.namesrv = net.split_addrs(namesrv)
        if not self.namesrv:
            raise ValueError("no name server address (namesrv 'host:port;host:port')")
        self.timeout_s = timeout_s
        self.client_id = f"{_local_ip()}@{instance_name or f'{os.getpid()}#{time.monotonic_ns()}'}"
        self.conns: dict[str, net.Connection] = {}
        self.connecting: dict[str, asyncio.Lock] = {}
        self.routes: dict[str, TopicRoute] = {}
        self.consumers: dict[str, GroupMember] = {}  # group -> PushConsumer or PullConsumer
        self.producers: set[str] = set()
        self.transaction_checks: dict[str, Callable[[Command, net.Connection], Awaitable[None]]] = {}   # group ->
        self.replies: dict[str, asyncio.Future[MessageExt]] = {}   # correlation id -> a request's reply to come
        self.users = 0
        self.task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ lifecycle (shared by its users)
    async def start(self) -> None:
        self.users += 1
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._housekeeping())

    async def stop(self) -> None:
        self.users -= 1
        if self.users > 0:
            return
        if self.task is not None:
            await stop_tasks([self.task])
            self.task = None
        for conn in self.conns.values():
            conn.close()
        self.conns.clear()

    async def _housekeeping(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            for topic in list(self.routes):
                try:
                    await self.route(topic, refresh=True)
                except MQClientError as e:
                    log.warning("route refresh for %s failed: %s", topic, e)
            await self.heartbeat_all()

    # ------------------------------------------------------------ requests
    async def connection(self, addr: str) -> net.Connection:
        conn = self.conns.get(addr)
        if conn is not None and conn.is_open:
            return conn
        lock = self.connecting.setdefault(addr, asyncio.Lock())
        async with lock:
            conn = self.conns.get(addr)
            if conn is None or not conn.is_open:
                try:
                    conn = await net.connect(addr, self.timeout_s, on_request=self._on_request)
                except (OSError, net.RemotingError) as e:
                    raise MQClientError(f"cannot connect to {addr}: {e}") from None
                self.conns[addr] = conn
        return conn

    async def invoke(self, addr: str, code: int, ext: dict[str, str] | None = None, body: bytes = b"",
                     timeout_s: float | None = None, language: str = "PYTHON") -> Command:
        conn = await self.connection(addr)
        try:
            return await conn.invoke(Command(code, ext, body, language=language), timeout_s or self.timeout_s)
        except (OSError, net.RemotingError) as e:
            raise MQClientError(f"request {code} to {addr} failed: {e}",
                                may_be_stored=isinstance(e, net.Unanswered)) from None

    async def call(self, addr: str, code: int, ext: dict[str, str] | None = None, body: bytes = b"",
                   timeout_s: float | None = None, ok: tuple[int, ...] = (RC.SUCCESS,),
                   language: str = "PYTHON") -> Command:
        """``invoke`` that raises MQBrokerError unless the response code is in ``ok``."""
        resp = await self.invoke(addr, code, ext, body, timeout_s, language)
        if resp.code not in ok:
            raise MQBrokerError(resp.code, resp.remark, addr)
        return resp

    async def oneway(self, addr: str, code: int, ext: dict[str, str] | None = None, body: bytes = b"") -> None:
        conn = await self.connection(addr)
        try:
            conn.oneway(Command(code, ext, body))
        except OSError as e:
            raise MQClientError(f"oneway {code} to {addr} failed: {e}") from None

    def _on_request(self, cmd: Command, conn: net.Connection) -> None:
        """A broker's request (ClientRemotingProcessor); one we do not serve is answered
        REQUEST_CODE_NOT_SUPPORTED, as a Java client answers it."""
        consumer = self.consumers.get(cmd.ext.get("consumerGroup", ""))
        if cmd.code == R.RESET_CONSUMER_CLIENT_OFFSET:
            self._reset_offsets(cmd, self.consumers.get(cmd.ext.get("group", "")))
            return
        if cmd.code == R.NOTIFY_CONSUMER_IDS_CHANGED:
            if consumer is not None:
                consumer.rebalance_soon()
            return
        if cmd.code == R.CONSUME_MESSAGE_DIRECTLY:
            asyncio.ensure_future(self._consume_directly(cmd, conn, consumer))
            return
        if cmd.code == R.CHECK_TRANSACTION_STATE:
            self._check_transaction(cmd, conn)
            return
        if cmd.code == R.PUSH_REPLY_MESSAGE_TO_CLIENT:
            self._answer(cmd, conn, self._reply_arrived(cmd))
            return
        if cmd.code != R.GET_CONSUMER_RUNNING_INFO:
            resp = cmd.response(RC.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")
        elif consumer is None:
            resp = _no_group(cmd)
        else:
            resp = cmd.response(body=consumer.running_info(cmd.ext.get("jstackEnable", "").lower() == "true"))
        self._answer(cmd, conn, resp)

    def _reply_arrived(self, cmd: Command) -> Command:
        """PUSH_REPLY_MESSAGE_TO_CLIENT: the reply to one of this client's requests (its
        CORRELATION_ID), as Java's ClientRemotingProcessor#receiveReplyMessage reads it."""
        e = cmd.ext
        try:
            props = parse_properties(e.get("properties") or "")
            props["ARRIVE_TIME"] = str(int(time.time() * 1000))
            body = zlib.decompress(cmd.body) if int(e.get("sysFlag", 0)) & COMPRESSED else cmd.body
            msg = MessageExt(e.get("topic", ""), body, props, int(e.get("queueId", 0)), -1, -1, "",
                             int(e.get("bornTimestamp", 0)), int(e.get("storeTimestamp", 0)),
                             int(e.get("reconsumeTimes") or 0), int(e.get("flag", 0)))
        except (ValueError, zlib.error) as err:
            return cmd.response(RC.SYSTEM_ERROR, f"the reply does not decode: {err}")
        waiting = self.replies.pop(props.get("CORRELATION_ID", ""), None)
        if waiting is None or waiting.done():
            log.warning("a reply came for request %s, which no longer waits", props.get("CORRELATION_ID"))
        else:
            waiting.set_result(msg)
        return cmd.response()

    def _check_transaction(self, cmd: Command, conn: net.Connection) -> None:
        """CHECK_TRANSACTION_STATE (oneway): to the transactional producer of the message's group
        (its PGROUP), if one runs here; else dropped, as Java drops it."""
        try:
            group = decode_messages(cmd.body)[0].properties.get("PGROUP", "")
        except (ValueError, IndexError) as e:
            log.warning("a transaction check-back does not decode: %s", e)
            return
        check = self.transaction_checks.get(group)
        if check is not None:
            asyncio.ensure_future(check(cmd, conn))

    @staticmethod
    def _answer(cmd: Command, conn: net.Connection, resp: Command) -> None:
        if not cmd.is_oneway and conn.is_open:
            conn.send(resp)

    @staticmethod
    def _reset_offsets(cmd: Command, consumer: GroupMember | None) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET (oneway: no answer): a push consumer of the group starts the
        topic's queues it owns over from the offsets in the body (ResetOffsetBody, or the C++
        clients' list form); anyone else has nothing to reset (Java's too)."""
        reset = getattr(consumer, "reset_offsets", None)
        if reset is None:
            log.info("offsets of group %s reset, which no push consumer here runs", cmd.ext.get("group"))
            return
        try:
            table = reset_offset_table(cmd.body)
        except ValueError as e:
            log.warning("a reset of group %s's offsets does not decode: %s", cmd.ext.get("group"), e)
            return
        asyncio.ensure_future(reset(cmd.ext.get("topic", ""), table))

    async def _consume_directly(self, cmd: Command, conn: net.Connection, consumer: GroupMember | None) -> None:
        """ConsumeMessageDirectlyResult of the consumer given the message in ``cmd``'s body; a
        pull consumer has no listener to give it to (Java's answer then: the group is not here)."""
        try:
            result = None if consumer is None else \
                await consumer.consume_directly(cmd.body, cmd.ext.get("brokerName", ""))
        except ValueError as e:
            resp = cmd.response(RC.SYSTEM_ERROR, f"the message to consume directly does not decode: {e}")
        else:
            resp = _no_group(cmd) if result is None else \
                cmd.response(body=json.dumps(result, separators=(",", ":")).encode())
        self._answer(cmd, conn, resp)

    # ------------------------------------------------------------ routes
    async def route(self, topic: str, refresh: bool = False) -> TopicRoute:
        """The topic's route from the first name server that answers; MQBrokerError(17) if none knows it."""
        if not refresh and topic in self.routes:
            return self.routes[topic]
        resp = await self.call_namesrv(R.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, what=f"topic {topic}")
        known = self.broker_addrs()
        route = self.routes[topic] = TopicRoute(topic, loads_tolerant(resp.body.decode()))
        if route.addresses() - known and (self.consumers or self.producers):
            await self.heartbeat_all()         # a broker we had not met: tell it who we are
        return route

    async def call_namesrv(self, code: int, ext: dict[str, str] | None = None, *, what: str) -> Command:
        """The answer of the first name server that gives one; MQBrokerError TOPIC_NOT_EXIST at
        once (the name server has no such topic); else MQClientError naming ``what`` was asked."""
        last: Exception | None = None
        for addr in self.namesrv:
            try:
                return await self.call(addr, code, ext)
            except MQBrokerError as e:
                if e.code == RC.TOPIC_NOT_EXIST:
                    raise
                last = e
            except MQClientError as e:
                last = e
        raise MQClientError(f"no name server answered for {what}: {last}")

    def broker_addrs(self) -> set[str]:
        """The brokers this client talks to: every master, and with consumers the slaves too (they
        may be read from)."""
        if self.consumers:
            return {a for r in self.routes.values() for a in r.addresses()}
        return {a for r in self.routes.values() for a in r.masters.values()}

    async def unregister(self, **group: str) -> None:
        """UNREGISTER_CLIENT to every known broker (``producerGroup=`` or ``consumerGroup=``),
        best effort: a broker that cannot be reached forgets the client when its channel closes."""
        for addr in sorted(self.broker_addrs()):
            try:
                await self.call(addr, R.UNREGISTER_CLIENT, {"clientID": self.client_id, **group})
            except MQClientError:
                pass

    async def heartbeat_all(self) -> None:
        body = json.dumps({"clientID": self.client_id,
                           "consumerDataSet": [c.consumer_data() for c in self.consumers.values()],
                           "producerDataSet": [{"groupName": g} for g in sorted(self.producers)]}).encode()
        for addr in sorted(self.broker_addrs()):
            try:
                await self.call(addr, R.HEART_BEAT, {}, body)
            except MQClientError as e:
                log.warning("heartbeat to %s failed: %s", addr, e)
