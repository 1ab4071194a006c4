"""Client management (broker:processor/ClientManageProcessor.java): HEART_BEAT, UNREGISTER_CLIENT,
GET_CONSUMER_LIST_BY_GROUP, and NOTIFY_CONSUMER_IDS_CHANGED pushed to every connection of a group
whose membership changed (on every reader at once: ``Members.bump`` wakes the others); the
orderly consumers' LOCK_BATCH_MQ / UNLOCK_BATCH_MQ (``readers.locks``); and what admin tools ask
about clients, GET_CONSUMER_CONNECTION_LIST, GET_PRODUCER_CONNECTION_LIST and
QUERY_TOPIC_CONSUME_BY_WHO, from every reader's published details (``readers.roster``).

GET_CONSUMER_RUNNING_INFO (307, ``mqadmin consumerStatus``) and CONSUME_MESSAGE_DIRECTLY (309,
readers/admin.py) are for the consumer itself, which a Java broker asks over the consumer's own
connection (callConsumer).  Only the reader its heartbeats come to holds that connection: that
reader asks it; any other forwards the request to that reader's port once (marked with ``HOP``,
so that a consumer that has just moved is "not online" rather than chased) and relays the answer.
"""
from __future__ import annotations

import json
import logging
import os
import time

import orjson

from rocketbox.net import client as net
from rocketbox.net.pending import RemotingError, TimedOut, next_opaque
from rocketbox.readers import roster
from rocketbox.readers.locks import QueueLocks, parse_lock_body
from rocketbox.readers.members import Members, MembersFull, parse_heartbeat
from rocketbox.readers.producers import Producers
from rocketbox.remoting import headers, sql92
from rocketbox.remoting.codec import RPC_ONEWAY, Command
from rocketbox.remoting.codes import V3_1_8_SNAPSHOT
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.shm.layout import S
from rocketbox.shm.roster import HOP, Roster
from rocketbox.store.groupconfig import subscription_group
from rocketbox.store.topicconfig import topic_config

log = logging.getLogger("rocketbox.reader")
CALL_CLIENT_S = 10.0          # how long a client has to answer the broker (Broker2Client.callClient)
NOT_ONLINE = "not online"     # tell_group's answer for a group with no member


class ClientProcessor:
    def __init__(self, broker):
        self.b, self.cfg, self.link, self.slot = broker, broker.cfg, broker.link, broker.slot
        self.topics, self.offsets, self.loop = broker.topics, broker.offsets, broker.loop
        self.members = Members(broker.sh, self.slot)
        self.producers = Producers()
        self.roster = Roster(broker.sh.roster_dir, self.slot)
        self.publish_due = False
        self.publish()                          # a new owner of the slot: what was published there is stale
        self.locks = QueueLocks(broker.sh.locks_dir)
        self.groups_sent: set[str] = set()
        self.full_warned_at = float("-inf")     # when a refusal for full client rows was last logged

    def handlers(self) -> dict:
        return {R.HEART_BEAT: self.heartbeat, R.UNREGISTER_CLIENT: self.unregister,
                R.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
                R.LOCK_BATCH_MQ: self.queue_locks, R.UNLOCK_BATCH_MQ: self.queue_locks,
                R.GET_CONSUMER_CONNECTION_LIST: self.consumer_connection,
                R.GET_PRODUCER_CONNECTION_LIST: self.producer_connection,
                R.QUERY_TOPIC_CONSUME_BY_WHO: self.consumed_by,
                R.GET_CONSUMER_RUNNING_INFO: self.running_info,
                R.RESET_CONSUMER_CLIENT_OFFSET: self.relay_to_group, R.CHECK_CLIENT_CONFIG: self.check_config}

    def check_config(self, cmd, _conn):
        """CHECK_CLIENT_CONFIG (46), which a Java push consumer sends for each subscription as it
        starts (broker:processor/ClientManageProcessor#checkClientConfig): a TAG one is fine; an
        SQL92 one is refused 1 without ``enablePropertyFilter``, and 23 with the parser's words
        when it does not parse."""
        try:
            sub = orjson.loads(cmd.body or b"{}").get("subscriptionData") or {}
        except (orjson.JSONDecodeError, AttributeError):
            return cmd.response(RC.SYSTEM_ERROR, "the CheckClientRequestBody does not decode")
        kind = sub.get("expressionType") or "TAG"
        if kind == "TAG":
            return cmd.response()
        if kind != "SQL92" or not self.cfg.enablePropertyFilter:
            return cmd.response(RC.SYSTEM_ERROR, f"The broker does not support consumer to filter message by {kind}")
        try:
            sql92.compile(str(sub.get("subString") or ""))
        except sql92.SQLError as e:
            return cmd.response(RC.SUBSCRIPTION_PARSE_FAILED, str(e))
        return cmd.response()

    def close(self) -> None:
        self.members.close()
        self.roster.close()

    # ------------------------------------------------------------ handlers
    def heartbeat(self, cmd, conn):
        try:
            hb = parse_heartbeat(cmd.body)
        except ValueError as e:
            return cmd.response(RC.SYSTEM_ERROR, f"heartbeat body does not parse: {e}")
        who = {"clientAddr": conn.peer, "clientId": hb.client_id, "language": cmd.language, "version": cmd.version}
        if hb.producers:
            self.producers.heartbeat(conn, hb.client_id, hb.producers, int(time.time() * 1000), who)
            self.publish_soon()
        return self._heartbeat(cmd, conn, hb.client_id, hb.consumers, who) if hb.consumers else cmd.response()

    async def _heartbeat(self, cmd, conn, client_id, consumers, who):
        now = int(time.time() * 1000)
        for data in consumers:
            group = data.group
            if group not in self.groups_sent and self.cfg.autoCreateSubscriptionGroup:
                self.link.push_group(subscription_group(group))
                self.groups_sent.add(group)
            retry = "%RETRY%" + group
            if self.topics.lookup(retry) is None:
                await self.link.auto_create_topic(topic_config(retry, 1, 1))
            try:
                joined = self.members.heartbeat(conn, client_id, data, now, who)
            except MembersFull as e:       # each such client asks again every heartbeat: logged once a minute
                if time.monotonic() - self.full_warned_at >= 60:
                    self.full_warned_at = time.monotonic()
                    log.warning("%s (from %s)", e, conn.peer)
                return cmd.response(RC.SYSTEM_ERROR, str(e))
            self.publish_soon()        # (before the notices: see publish_soon)
            if joined:
                log.info("consumer %s joined group %s from %s", client_id, group, conn.peer)
                self.notify_changes()
        return cmd.response()

    def unregister(self, cmd, _conn):
        h = headers.decode(cmd)
        left = bool(h["consumerGroup"]) and self.members.remove(h["consumerGroup"], h["clientID"])
        if h["producerGroup"]:
            self.producers.remove(h["producerGroup"], h["clientID"])
        self.publish_soon()
        if left:
            log.info("consumer %s left group %s", h["clientID"], h["consumerGroup"])
            self.notify_changes()
        return cmd.response()

    def consumer_list(self, cmd, _conn):
        h = headers.decode(cmd)
        ids = self.members.group_members(h["consumerGroup"])
        if not ids:
            return cmd.response(RC.SYSTEM_ERROR, f"no consumer for this group, {h['consumerGroup']}")
        return cmd.response(body=json.dumps({"consumerIdList": ids}).encode())

    def queue_locks(self, cmd, _conn):
        """LOCK_BATCH_MQ, answered with the queues the client holds now (LockBatchResponseBody),
        and UNLOCK_BATCH_MQ."""
        lock = cmd.code == R.LOCK_BATCH_MQ
        try:
            group, client_id, mqs = parse_lock_body(cmd.body)
        except ValueError as e:
            return cmd.response(RC.SYSTEM_ERROR, f"{'lock' if lock else 'unlock'} body does not parse: {e}")
        if not lock:
            self.locks.unlock(group, client_id, mqs)
            return cmd.response()
        got = self.locks.try_lock(group, client_id, mqs, int(time.time() * 1000))
        return cmd.response(body=json.dumps({"lockOKMQSet": got}).encode())

    # ------------------------------------------------------------ what admin tools read
    def _docs(self) -> list[dict]:
        """Every live reader's client details, this one's (from memory) first."""
        return [self._details(), *self._others()]

    def _others(self) -> list[dict]:
        """What the other live readers published."""
        owners = self.b.sh.slots[:, S.OWNER_PID]
        return self.roster.others({i: int(owners[i]) for i in self.members.live_slots()})

    def consumer_connection(self, cmd, _conn):
        """ConsumerConnection: the group's members (every reader's), each with its address,
        language and version, and the group's consume type, model and subscriptions."""
        group = headers.decode(cmd)["consumerGroup"]
        body = roster.consumer_connection(group, self._docs(), self.members.group_members(group))
        if body is None:
            return cmd.response(RC.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        return cmd.response(body=orjson.dumps(body))

    def producer_connection(self, cmd, _conn):
        group = headers.decode(cmd)["producerGroup"]
        body = roster.producer_connection(group, self._docs())
        if body is None:
            return cmd.response(RC.SYSTEM_ERROR, f"the producer group[{group}] not exist")
        return cmd.response(body=orjson.dumps(body))

    def consumed_by(self, cmd, _conn):
        """GroupList: the groups that subscribe to the topic now, and those with offsets on it."""
        topic = headers.decode(cmd)["topic"]
        groups = roster.groups_subscribed(topic, self._docs()) | self.offsets.groups_of(topic)
        return cmd.response(body=orjson.dumps({"groupList": sorted(groups)}))

    # ------------------------------------------------------------ what only the consumer knows
    def running_info(self, cmd, _conn):
        h = headers.decode(cmd)
        return self.call_consumer(cmd, h["consumerGroup"], h["clientId"])

    async def call_consumer(self, cmd, group: str, client_id: str, body: bytes | None = None, **ext):
        """The answer of the consumer ``client_id`` of ``group`` to ``cmd`` (its extFields, and its
        body unless ``body`` is given, passed on as they came, ``ext`` added), or SYSTEM_ERROR /
        CONSUME_MSG_TIMEOUT with Java's remarks."""
        req = Command(cmd.code, {**{k: v for k, v in cmd.ext.items() if k != HOP}, **ext},
                      cmd.body if body is None else body, language="JAVA")
        conn = self.members.conns.get(group, {}).get(client_id)
        if conn is not None:
            version = self.members.who[(group, client_id)]["version"]
            if version < V3_1_8_SNAPSHOT:
                return cmd.response(RC.SYSTEM_ERROR, f"The Consumer <{client_id}> Version <{version}> too low to "
                                                     f"finish, please upgrade it to V3_1_8_SNAPSHOT")
            where, answer = None, conn.invoke(req, CALL_CLIENT_S)
        else:
            port = None if HOP in cmd.ext else roster.holder(group, client_id, self._others())
            if port is None or client_id not in self.members.group_members(group):
                return cmd.response(RC.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online")
            req.ext[HOP], where = str(self.slot), f"127.0.0.1:{port}"
            answer = self._forward(where, req)
        try:
            got = await answer
        except TimedOut as e:
            return cmd.response(RC.CONSUME_MSG_TIMEOUT, f"consumer <{group}> <{client_id}> Timeout: {e}")
        except (OSError, RemotingError) as e:
            via = f" (through the reader at {where})" if where else ""
            return cmd.response(RC.SYSTEM_ERROR, f"invoke consumer <{group}> <{client_id}> Exception{via}: {e}")
        return cmd.response(got.code, got.remark, got.ext, got.body)

    async def tell_group(self, group: str, req: Command, min_version: int) -> str | None:
        """Send ``req`` (a request of the broker's, oneway) to every member of ``group``: this
        reader's own over their connections, another reader's through that reader (forwarded
        once, marked ``HOP``: ``relay_to_group``).  -> None once all were sent it; ``NOT_ONLINE``
        when the group has no member; else why it was sent to none (a member older than
        ``min_version``, Java's words) or not to all (a reader that did not pass it on)."""
        members = set(self.members.group_members(group))
        if not members:
            return NOT_ONLINE
        ports, versions = set(), {cid: self.members.who[(group, cid)]["version"]
                                  for cid in self.members.conns.get(group, {}) if (group, cid) in self.members.who}
        for doc in self._others():
            for c in ((doc.get("consumers") or {}).get(group) or {}).get("connectionSet") or ():
                if c.get("clientId") in members and c.get("clientId") not in versions:
                    versions[c["clientId"]] = int(c.get("version", 0))
                    ports.add(doc.get("port"))
        old = sorted(v for v in versions.values() if v < min_version)
        if old:
            return f"the client does not support this feature. version={old[0]}"
        self._send_to_group(group, req)
        for port in sorted(p for p in ports if p is not None):
            fwd = Command(req.code, {**req.ext, HOP: str(self.slot)}, req.body, language="JAVA")
            try:
                got = await self._forward(f"127.0.0.1:{port}", fwd)
            except (OSError, RemotingError) as e:
                return f"the members of {group} on the reader at 127.0.0.1:{port} were not told: {e}"
            if got.code != RC.SUCCESS:
                return f"the members of {group} on the reader at 127.0.0.1:{port} were not told: {got.remark}"
        return None

    def relay_to_group(self, cmd, _conn):
        """A request of the broker's to a group's members that another reader passes on to this
        reader's (``tell_group``); from anyone else, a code a broker does not serve."""
        if HOP not in cmd.ext:
            return cmd.response(RC.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")
        self._send_to_group(cmd.ext.get("group", ""), Command(
            cmd.code, {k: v for k, v in cmd.ext.items() if k != HOP}, cmd.body, language="JAVA"))
        return cmd.response()

    def _send_to_group(self, group: str, req: Command) -> None:
        """``req``, oneway, to each of this reader's connections of ``group``'s members."""
        for conn in set(self.members.conns.get(group, {}).values()):
            conn.send(Command(req.code, req.ext, req.body, opaque=next_opaque(), flag=RPC_ONEWAY, language="JAVA"))

    @staticmethod
    async def _forward(addr: str, req: Command) -> Command:
        """``req`` put to the reader at ``addr`` over a connection of its own, which then closes
        (a question an operator asks now and then: no connection is kept)."""
        peer = await net.connect(addr)
        try:
            return await peer.invoke(req, CALL_CLIENT_S + 2.0)
        finally:
            peer.close()

    # ------------------------------------------------------------ publishing this reader's clients
    def _details(self) -> dict:
        return {"pid": os.getpid(), "port": self.cfg.reader_port(self.b.index),
                "consumers": self.members.details(), "producers": self.producers.details()}

    def publish_soon(self) -> None:
        """Publish at the end of this loop turn if the details changed (once however many did).
        Called before any notice to a client is written, so that the callback runs before the
        connection's write of this turn (both are ``call_soon``s, run in order): a client that has
        its answer can ask any reader and find itself published.  (A notice queued first would
        take the answer out with it, ahead of the publish.)"""
        if not self.publish_due and (self.members.details_changed or self.producers.details_changed):
            self.publish_due = True
            self.loop.call_soon(self.publish)

    def publish(self) -> None:
        self.publish_due = False
        self.members.details_changed = self.producers.details_changed = False
        self.roster.publish(self._details())

    # ------------------------------------------------------------ membership changes
    def connection_closed(self, conn) -> None:
        left = self.members.drop_connection(conn)
        self.producers.drop_connection(conn)
        self.publish_soon()
        if left:
            self.notify_changes()

    def notify_changes(self) -> None:
        """Tell this reader's connections of every group whose member set changed."""
        for group in self.members.changed_groups():
            self._send_to_group(group, Command(R.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group}))

    def follow_members(self) -> None:
        """On a wake: another reader's members may have changed (``Members.bump`` posts us)."""
        if self.members.others_moved():
            self.notify_changes()

    def tick(self, now_ms: int) -> None:
        """Once a second: expire silent clients; follow the other readers' membership changes."""
        expired = self.members.expire(now_ms)
        for group, client, conn in expired:
            log.warning("consumer %s of group %s expired: no heartbeat for 120 s", client, group)
            if conn is not None:
                conn.transport.close()
        if expired or self.members.others_moved():
            self.notify_changes()
        for group, client in self.producers.expire(now_ms):
            log.warning("producer %s of group %s expired: no heartbeat for 120 s", client, group)
        self.publish_soon()
