"""Replication faults (issue #52): a master killed under SYNC_MASTER load, a slave killed or cut off
mid-stream, a slave whose store was wiped.  Each recovers with nothing acknowledged lost: every
message a SYNC_MASTER acknowledged SEND_OK is on the slave, once and byte for byte."""
from __future__ import annotations

import asyncio
import collections
import os
import shutil
import time

from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.shm.layout import C
from tests.integration.harness import create_topic, stored_keys, wait_route
from tests.integration.test_readers import frozen, send_v2
from tests.integration.test_replication import _same_prefix
from tests.integration.test_slave import FILE, caught_up, pair
from tests.integration.wire import Wire


def test_every_message_a_sync_master_acknowledged_is_on_the_slave_after_a_kill9(appliance_factory):
    from rocketbox.client.message import Message
    from rocketbox.client.producer import Producer
    m, s = pair(appliance_factory, brokerRole="SYNC_MASTER")
    create_topic(m, "Acked", 4)
    wait_route(m, "Acked")
    acked: list[str] = []
    statuses: collections.Counter = collections.Counter()

    async def produce(stop: asyncio.Event, worker: int) -> None:
        async with Producer(f"pg{worker}", m.namesrv, retries=0, send_timeout_s=2) as p:
            i = 0
            while not stop.is_set():
                key = f"w{worker}-{i}"
                i += 1
                try:
                    r = await p.send(Message("Acked", f"body-{key}".encode(), properties={"KEYS": key}))
                except Exception:
                    statuses["failed"] += 1
                    continue
                statuses[r.status] += 1
                if r.status == "SEND_OK":
                    acked.append(key)

    async def run() -> None:
        stop = asyncio.Event()
        tasks = [asyncio.ensure_future(produce(stop, w)) for w in range(6)]
        while len(acked) < 1500:
            await asyncio.sleep(0.05)
        m.kill9()                                          # mid-stream: sends in flight die with it
        await asyncio.sleep(0.5)
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    asyncio.run(run())
    assert statuses["SEND_OK"] >= 1500, statuses
    sh = s.shared()
    deadline = time.monotonic() + 20
    while int(sh.control[C.DISPATCHED]) < int(sh.control[C.WRITTEN]) - 4096:   # (a torn last record waits)
        assert time.monotonic() < deadline
        time.sleep(0.1)
    sh.close()
    s.stop()
    stored = stored_keys(s.cfg)
    assert not [k for k in acked if stored[k] != 1], [k for k in acked if stored[k] != 1][:10]
    assert max(stored.values()) == 1                       # nothing twice


def test_a_slave_killed_or_cut_off_mid_stream_catches_up_byte_for_byte(appliance_factory):
    m, s = pair(appliance_factory, haHousekeepingInterval="2000")
    w = Wire("127.0.0.1", m.cfg.listenPort)
    try:
        for i in range(150):
            assert send_v2(w, "Stream", os.urandom(6000), f"KEYS\x01a{i}", queue=i % 2).code == RC.SUCCESS
        s.kill9()                                          # killed mid-stream, with what it had not dispatched
        for i in range(150):
            assert send_v2(w, "Stream", os.urandom(6000), f"KEYS\x01b{i}", queue=i % 2).code == RC.SUCCESS
        s.start()
        caught_up(m, s)
        # cut off: its replicator silent past the master's housekeeping interval (2 s here) is
        # dropped by the master; once it runs again it connects again and catches up
        with frozen(s, "replicator"):
            for i in range(100):
                assert send_v2(w, "Stream", os.urandom(6000), f"KEYS\x01c{i}", queue=i % 2).code == RC.SUCCESS
            time.sleep(3.5)
            assert "gone" in m.log_text()
        end = caught_up(m, s)
        assert end > 2 * FILE
    finally:
        w.close()


def test_a_slave_whose_store_was_wiped_copies_the_whole_retained_commitlog(appliance_factory):
    """Beyond 4.9.8 (whose master sends an empty slave its last file only): a rocketbox master
    sends an empty slave everything it still holds."""
    m, s = pair(appliance_factory)
    w = Wire("127.0.0.1", m.cfg.listenPort)
    try:
        for i in range(350):
            assert send_v2(w, "Wiped", os.urandom(7000), f"KEYS\x01w{i}").code == RC.SUCCESS
        caught_up(m, s)
        s.stop()
        shutil.rmtree(os.path.join(s.dir, "store"))
        s.start()
        end = caught_up(m, s)
        assert end > 2 * FILE and _same_prefix(m.cfg.commitlog_dir, s.cfg.commitlog_dir, end, 0)
        assert sorted(os.listdir(s.cfg.commitlog_dir)) == sorted(os.listdir(m.cfg.commitlog_dir))
    finally:
        w.close()
