"""Client management (broker:processor/ClientManageProcessor.java): HEART_BEAT, UNREGISTER_CLIENT,
GET_CONSUMER_LIST_BY_GROUP, and NOTIFY_CONSUMER_IDS_CHANGED pushed to every connection of a group
whose membership changed (on every reader at once: ``Members.bump`` wakes the others); and the
orderly consumers' LOCK_BATCH_MQ / UNLOCK_BATCH_MQ (``readers.locks``).
"""
from __future__ import annotations

import itertools
import json
import logging
import time

from readers.locks import QueueLocks, parse_lock_body
from readers.members import Members, MembersFull, parse_heartbeat
from remoting import headers
from remoting.codec import RPC_ONEWAY, Command
from remoting.codes import RequestCode as R, ResponseCode as RC
from writer.groups import subscription_group
from writer.topics import topic_config

log = logging.getLogger("rocketbox.reader")
_opaques = itertools.count(1)


class ClientProcessor:
    def __init__(self, broker):
        self.b, self.cfg, self.link = broker, broker.cfg, broker.link
        self.members = Members(broker.sh, self.link.slot)
        self.locks = QueueLocks(broker.sh.locks_dir)
        self.groups_sent: set[str] = set()
        self.full_warned_at = float("-inf")     # when a refusal for full client rows was last logged

    def handlers(self) -> dict:
        return {R.HEART_BEAT: self.heartbeat, R.UNREGISTER_CLIENT: self.unregister,
                R.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
                R.LOCK_BATCH_MQ: self.queue_locks, R.UNLOCK_BATCH_MQ: self.queue_locks}

    # ------------------------------------------------------------ handlers
    def heartbeat(self, cmd, conn):
        try:
            client_id, consumers = parse_heartbeat(cmd.body)
        except ValueError as e:
            return cmd.response(RC.SYSTEM_ERROR, f"heartbeat body does not parse: {e}")
        return self._heartbeat(cmd, conn, client_id, consumers)

    async def _heartbeat(self, cmd, conn, client_id, consumers):
        now = int(time.time() * 1000)
        for group, subs in consumers:
            if group not in self.groups_sent and self.cfg.autoCreateSubscriptionGroup:
                self.link.push_group(subscription_group(group))
                self.groups_sent.add(group)
            retry = "%RETRY%" + group
            if self.link.topics.lookup(retry) is None:
                await self.link.auto_create_topic(topic_config(retry, 1, 1))
            try:
                joined = self.members.heartbeat(conn, client_id, group, subs, now)
            except MembersFull as e:       # each such client asks again every heartbeat: logged once a minute
                if time.monotonic() - self.full_warned_at >= 60:
                    self.full_warned_at = time.monotonic()
                    log.warning("%s (from %s)", e, conn.peer)
                return cmd.response(RC.SYSTEM_ERROR, str(e))
            if joined:
                log.info("consumer %s joined group %s from %s", client_id, group, conn.peer)
                self.notify_changes()
        return cmd.response()

    def unregister(self, cmd, _conn):
        h = headers.decode(cmd)
        if h["consumerGroup"] and self.members.remove(h["consumerGroup"], h["clientID"]):
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

    # ------------------------------------------------------------ membership changes
    def connection_closed(self, conn) -> None:
        if self.members.drop_connection(conn):
            self.notify_changes()

    def notify_changes(self) -> None:
        """Tell this reader's connections of every group whose member set changed."""
        for group in self.members.changed_groups():
            for conn in set(self.members.conns.get(group, {}).values()):
                conn.send(Command(R.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group},
                                  opaque=next(_opaques) & 0x7FFFFFFF, flag=RPC_ONEWAY, language="JAVA"))

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
