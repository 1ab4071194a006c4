"""The broker's registration with every name server (broker:out/BrokerOuterAPI.java): REGISTER_BROKER
with the whole topic table every 30 s, with the topics that changed when the table changes,
UNREGISTER_BROKER when the appliance stops.  A topic made here is answered once a registration
begun after it has ended, as RocketMQ answers a topic's creation once its name servers have it;
changes that come while one is under way share the next one.

A registration after a change carries only the changed topics (``TopicChanges``: the shared rows
that differ from the last registration's) under topics.json's new dataVersion, as RocketMQ's
``registerIncrementBrokerData`` carries the one topic an admin made: a name server adds or updates
the topics a master registers and keeps its others.  The registration of a topic's creation
then costs the same with 16 topics or 16,000, where the whole table (read from topics.json here,
parsed by every name server) grew with each.  Their TopicConfigs come from the shared rows, whose fields are all a route holds
(``topicFilterType`` is not among them: it is given as SINGLE_TAG).  A name server that missed
one (it failed) gets the whole table when it is tried again.
A name server that failed is tried again after 1 s, then 2, 4, ... up to 30 s (all of them: the
request is one), and its failure is logged once until it succeeds again.
Reader 0 does it for the whole appliance; the address it registers is HAProxy's (``listenPort``).
On a slave, the answer names its master: written down for the replicator (``shm/registered.py``).
"""
from __future__ import annotations

import asyncio
import logging
import time

import orjson

from rocketbox.net import client as net
from rocketbox.remoting.codec import Command
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.shm import registered
from rocketbox.shm.layout import C, T
from rocketbox.shm.tables import TopicChanges
from rocketbox.store import topicjournal
from rocketbox.store.message import body_crc
from rocketbox.store.topicconfig import topic_config

log = logging.getLogger("rocketbox.reader")
PERIOD_S = 30.0
TIMEOUT_S = 6.0           # registerBrokerTimeoutMills
RETRY_FIRST_S = 1.0       # a name server that failed is tried again after this, doubling up to PERIOD_S


def addresses(cfg) -> list[str]:
    return net.split_addrs(cfg.namesrvAddr)


class Registrar:
    def __init__(self, cfg, views: dict):
        """``views``: the shared state's, for the topic table and its dataVersion."""
        self.cfg, self.control = cfg, views["control"]
        self.changes = TopicChanges(views, self.control)
        self.changes.mark()                 # what is there now is registered whole (reader 0's first)
        self.lock = asyncio.Lock()          # one registration at a time: each carries what the last did not
        self.conns: dict[str, net.Connection] = {}
        self.failing: set[str] = set()
        self.master: tuple | None = None    # a slave's master's (HA address, address), last written down
        self.retry_in, self.retry_at = RETRY_FIRST_S, 0.0     # while some name server fails (monotonic s)
        self.waiting: asyncio.Future | None = None      # changes not yet covered by a registration begun
        self.worker: asyncio.Task | None = None         # the registrations that cover changes

    def _fields(self) -> dict:
        c = self.cfg
        return {"brokerName": c.brokerName, "brokerAddr": c.broker_addr, "clusterName": c.brokerClusterName,
                "brokerId": str(c.brokerId)}

    @staticmethod
    def _body(version: dict, table: dict) -> bytes:
        wrapper = {"dataVersion": version, "topicConfigTable": table}
        return orjson.dumps({"filterServerList": [], "topicConfigSerializeWrapper": wrapper})

    def _whole(self) -> bytes:
        """The whole table, as topics.json has it (persisted before the shared rows show a change,
        so marking them seen first leaves nothing out)."""
        self.changes.mark()
        data = topicjournal.read(self.cfg.config_dir) or {}
        return self._body(data.get("dataVersion", {"counter": 0, "timestamp": 0}), data.get("topicConfigTable", {}))

    def _changed(self) -> bytes | None:
        """The topics changed since the last registration, or None when none did."""
        changed = self.changes.take()
        if not changed:
            return None
        version = {"counter": int(self.control[C.TOPICS_DATA_VERSION]),
                   "timestamp": int(self.control[C.TOPICS_DATA_VERSION_TS])}
        return self._body(version, {name: topic_config(name, row[T.READ_QUEUE_NUMS], row[T.WRITE_QUEUE_NUMS],
                                                       row[T.PERM], row[T.TOPIC_SYS_FLAG], bool(row[T.ORDER]))
                                    for name, row in changed})

    async def _invoke(self, addr: str, cmd: Command) -> Command:
        conn = self.conns.get(addr)
        if conn is None or not conn.is_open:
            conn = self.conns[addr] = await net.connect(addr, TIMEOUT_S)
        return await conn.invoke(cmd, TIMEOUT_S)

    async def register_all(self) -> None:
        """Register the whole topic table with every name server; when one took it (clients can
        find the routes), say so in the control block: ``appliance start``'s ready line waits for it."""
        async with self.lock:
            await self._register_body(self._whole())
            if len(self.failing) < len(addresses(self.cfg)):
                self.control[C.REGISTERED_MS] = int(time.time() * 1000)

    async def register_changes(self) -> None:
        """Register the topics changed since the last registration, if any."""
        async with self.lock:
            body = self._changed()
            if body is not None:
                await self._register_body(body)

    async def _register_body(self, body: bytes) -> None:
        ext = {**self._fields(), "haServerAddr": self.cfg.ha_addr,
               "compressed": "false", "bodyCrc32": str(body_crc(body))}
        await asyncio.gather(*(self._register(a, Command(R.REGISTER_BROKER, dict(ext), body))
                               for a in addresses(self.cfg)))
        if self.failing:
            self.retry_at = time.monotonic() + self.retry_in
            self.retry_in = min(PERIOD_S, self.retry_in * 2)
        else:
            self.retry_in = RETRY_FIRST_S

    def changed(self) -> asyncio.Future:
        """A topic changed: a future that is done once a registration begun after now has ended
        (whether each name server took it or not: failures are logged, and retried)."""
        if self.waiting is None:
            self.waiting = asyncio.get_running_loop().create_future()
            if self.worker is None or self.worker.done():
                self.worker = asyncio.get_running_loop().create_task(self._register_changes())
        return self.waiting

    async def _register_changes(self) -> None:
        while self.waiting is not None:
            covered, self.waiting = self.waiting, None
            try:
                await self.register_changes()
            except Exception:
                log.exception("registration after a topic change failed")
            finally:
                if not covered.done():
                    covered.set_result(None)

    def retry_due(self) -> bool:
        """A name server failed and its back-off (1 s, doubling to 30 s) has passed: one not up
        yet is found soon, and one that is not a name server is not hammered every second."""
        return bool(self.failing) and time.monotonic() >= self.retry_at

    async def _register(self, addr: str, cmd: Command) -> None:
        try:
            resp = await self._invoke(addr, cmd)
            if resp.code != RC.SUCCESS:
                raise net.RemotingError(f"code {resp.code}: {resp.remark}")
            ha, master = (resp.ext or {}).get("haServerAddr"), (resp.ext or {}).get("masterAddr")
            if self.cfg.slave and master and (ha, master) != self.master:
                self.master = (ha, master)          # a slave's master, as the name server knows it
                registered.write(self.cfg.run_dir, ha or "", master)
            if addr in self.failing:
                log.info("registered with name server %s again", addr)
                self.failing.discard(addr)
        except (OSError, net.RemotingError) as e:
            if addr not in self.failing:
                log.warning("cannot register with name server %s: %s", addr, e)
                self.failing.add(addr)

    async def unregister_all(self) -> None:
        async def one(addr):
            try:
                await self._invoke(addr, Command(R.UNREGISTER_BROKER, self._fields()))
            except (OSError, net.RemotingError) as e:
                log.warning("cannot unregister from name server %s: %s", addr, e)
        await asyncio.gather(*(one(a) for a in addresses(self.cfg)))

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self.conns.clear()
