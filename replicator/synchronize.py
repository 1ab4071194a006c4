"""A slave's copy of its master's metadata (4.9.8's SlaveSynchronize, FACTS-wave2 §1): every 10 s,
the first 3 s after the start, while the master's address is known and is not this broker's:

1. GET_ALL_TOPIC_CONFIG (21): when its dataVersion differs from the last copied, each topic the
   slave lacks, or holds with other queue numbers, permission, flags or order, goes to the slave's
   writer as a TOPIC entry (4.9.8 replaces the table; here a topic only the slave has stays);
2. GET_ALL_CONSUMER_OFFSET (43): every offset that differs from the slave's, as OFFSET entries (a
   merge, as 4.9.8's ``putAll``: so an offset committed to the slave while its master was down is
   overwritten by the master's once it is back, and those messages are consumed again);
3. GET_ALL_DELAY_OFFSET (45): written to ``config/delayOffset.json`` as it came (no scheduler runs
   on a slave: this process is the file's writer there);
4. GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201): when its dataVersion differs, every group as a GROUP
   entry (the writer skips those it holds the same).

The master's address: what the name servers answered the slave's registration, else, with
``haMasterAddress`` pinned, that host and the port below it (4.9.8 has none then, and skips).
"""
from __future__ import annotations

import logging
import os

import numpy as np

from rocketbox.net import client as net
from rocketbox.remoting.codec import Command
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.shm import protocol as P
from rocketbox.shm import registered
from rocketbox.shm.layout import T
from rocketbox.shm.ringclient import RingClient
from rocketbox.shm.tables import OffsetIndex, TopicIndex
from rocketbox.store import configfile

log = logging.getLogger("rocketbox.replicator")
FIRST_S, PERIOD_S, TIMEOUT_S = 3.0, 10.0, 3.0
_TOPIC_FIELDS = ((T.READ_QUEUE_NUMS, "readQueueNums", 16), (T.WRITE_QUEUE_NUMS, "writeQueueNums", 16),
                 (T.PERM, "perm", 6), (T.TOPIC_SYS_FLAG, "topicSysFlag", 0), (T.ORDER, "order", False))


class Synchronizer:
    def __init__(self, cfg, shared, ring: RingClient):
        self.cfg, self.ring = cfg, ring
        self.topics, self.offsets = TopicIndex(shared.views, shared.control), OffsetIndex(shared.views, shared.control)
        self.topics_version: dict | None = None        # the master's dataVersions last copied
        self.groups_version: dict | None = None
        self.delay: bytes | None = None
        self.conn: net.Connection | None = None
        self.failing: str | None = None                # the last failure logged (said once)
        self.copied = 0                                # passes that completed

    def master(self) -> str | None:
        addr = registered.read(self.cfg.run_dir).get("masterAddr")
        if not addr and len(self.cfg.haMasterAddress) >= 6:
            host, port = net.split_addr(self.cfg.haMasterAddress)
            addr = f"{host}:{port - 1}"
        return None if not addr or addr == self.cfg.broker_addr else addr

    async def once(self) -> None:
        """One pass; a failure is logged (once until a pass succeeds) and the next pass tries again."""
        addr = self.master()
        if addr is None:
            return
        try:
            if self.conn is None or not self.conn.is_open:
                self.conn = await net.connect(addr, TIMEOUT_S)
            await self._topics(await self._get(R.GET_ALL_TOPIC_CONFIG))
            await self._offsets(await self._get(R.GET_ALL_CONSUMER_OFFSET))
            self._delay(await self._get(R.GET_ALL_DELAY_OFFSET))
            self._groups(await self._get(R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
        except (OSError, TimeoutError, net.RemotingError, ValueError, KeyError, TypeError) as e:
            why = f"copying the master's metadata from {addr} failed: {type(e).__name__}: {e}"
            if why != self.failing:
                log.warning("replicator: %s", why)
                self.failing = why
            if self.conn is not None:
                self.conn.close()
                self.conn = None
            return
        if self.failing:
            log.info("replicator: copying the master's metadata from %s again", addr)
            self.failing = None
        self.copied += 1

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    async def _get(self, code: int) -> dict | bytes:
        assert self.conn is not None
        resp = await self.conn.invoke(Command(code, {}), TIMEOUT_S)
        if resp.code != RC.SUCCESS:
            raise net.RemotingError(f"request {code} answered {resp.code}: {resp.remark}")
        return resp.body if code == R.GET_ALL_DELAY_OFFSET else configfile.loads_object(resp.body or b"{}")

    async def _topics(self, data) -> None:
        version = data.get("dataVersion")
        if version is not None and version == self.topics_version:
            return
        for name, tc in (data.get("topicConfigTable") or {}).items():
            _tidx, row = self.topics.live(name)
            if row is None or any(row[i] != int(tc.get(key, default)) for i, key, default in _TOPIC_FIELDS):
                self.ring.push_topic(tc)
        self.topics_version = version

    async def _offsets(self, data) -> None:
        rows = []
        for key, table in (data.get("offsetTable") or {}).items():
            for qid, offset in table.items():
                if self.offsets.get(key.encode(), int(qid)) != int(offset):
                    rows.append((key.encode(), int(qid), 0, int(offset)))
        if rows:
            self.ring.push_offsets(np.array(rows, P.OFFSET_UPDATE))

    def _delay(self, body) -> None:
        if body and body != self.delay:
            configfile.write_bytes(os.path.join(self.cfg.config_dir, "delayOffset.json"), body)
            self.delay = body

    def _groups(self, data) -> None:
        version = data.get("dataVersion")
        if version is not None and version == self.groups_version:
            return
        for sg in (data.get("subscriptionGroupTable") or {}).values():
            self.ring.push_group(sg)
        self.groups_version = version
