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
from rocketbox.store import indexfile
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


def _lose_tail(m, at: int) -> bytes:
    """The master's CommitLog loses everything from ``at`` (a record boundary) on, as when its page
    cache dies with the box before a flush: those bytes read as zeros.  -> what was lost."""
    lost = []
    for name in sorted(os.listdir(m.cfg.commitlog_dir)):
        start = int(name)
        if start + FILE <= at:
            continue
        with open(os.path.join(m.cfg.commitlog_dir, name), "r+b") as f:
            f.seek(max(0, at - start))
            lost.append(f.read())
            f.seek(max(0, at - start))
            f.write(bytes(len(lost[-1])))
    return b"".join(lost).rstrip(b"\0")


def test_a_slave_ahead_of_a_master_that_lost_its_tail_cuts_back_and_carries_on(appliance_factory):
    """Beyond 4.9.8 (whose slave stays disconnected for good): the master lost the last records
    its slave copied, and took new ones before the slave came back; the slave cuts its CommitLog
    back to where the master's start began, keeps what it cut in the quarantine, and copies the
    master's new records, to the same CommitLog, consume queues and index."""
    m, s = pair(appliance_factory)
    w = Wire("127.0.0.1", m.cfg.listenPort)
    body = "x" * 5000 + "body-{}"
    try:
        for i in range(150):
            assert send_v2(w, "Lost", body.format(f"a{i}").encode(), f"KEYS\x01a{i}", queue=i % 2).code == RC.SUCCESS
        kept = caught_up(m, s)
        for i in range(60):
            assert send_v2(w, "Lost", body.format(f"b{i}").encode(), f"KEYS\x01b{i}", queue=i % 2).code == RC.SUCCESS
        ahead = caught_up(m, s)
        w.close()
        with frozen(s, "replicator"):                      # it comes back only once the master took new records
            m.stop()
            lost = _lose_tail(m, kept)
            assert len(lost) == ahead - kept
            m.start()
            w = Wire("127.0.0.1", m.cfg.listenPort)
            for i in range(40):
                assert send_v2(w, "Lost", body.format(f"c{i}").encode(), f"KEYS\x01c{i}", queue=i % 2).code == RC.SUCCESS
        for i in range(40, 80):
            assert send_v2(w, "Lost", body.format(f"c{i}").encode(), f"KEYS\x01c{i}", queue=i % 2).code == RC.SUCCESS
        end = caught_up(m, s)
        assert end > ahead
        cut = os.path.join(s.cfg.root, "quarantine", f"cut-{kept:020d}-{ahead:020d}.commitlog")
        with open(cut, "rb") as f:
            assert f.read() == lost                        # what the slave cut is what the master lost
        assert "was cut back to it" in s.log_text() and "lost its tail" in m.log_text()
        def indexed(app, key: str) -> list[int]:
            return indexfile.find(app.cfg.index_dir, f"Lost#{key}", app.cfg.maxHashSlotNum, app.cfg.maxIndexNum)
        assert indexed(s, "b5") == [] and indexed(s, "c5") == indexed(m, "c5") != []   # lost keys gone, new in
    finally:
        w.close()
    s.stop()
    m.stop()
    expect = collections.Counter([f"a{i}" for i in range(150)] + [f"c{i}" for i in range(80)])
    assert stored_keys(m.cfg) == expect and stored_keys(s.cfg) == expect
    assert _same_prefix(m.cfg.commitlog_dir, s.cfg.commitlog_dir, end, 0)


def test_a_slave_does_not_cut_back_to_an_empty_master(appliance_factory):
    """A master whose store was wiped holds none of its slave's history: the slave keeps all of it,
    says why once, and waits for the operator (4.9.8's slave stays disconnected too)."""
    m, s = pair(appliance_factory)
    w = Wire("127.0.0.1", m.cfg.listenPort)
    try:
        for i in range(50):
            assert send_v2(w, "Kept", os.urandom(3000), f"KEYS\x01k{i}").code == RC.SUCCESS
    finally:
        w.close()
    end = caught_up(m, s)
    m.stop()
    shutil.rmtree(os.path.join(m.dir, "store"))
    m.start()
    deadline = time.monotonic() + 20
    while "does not cut back" not in s.log_text():
        assert time.monotonic() < deadline, s.log_text()[-2000:]
        time.sleep(0.1)
    time.sleep(2.5)                                        # it tries again, and again keeps everything
    sh = s.shared()
    try:
        assert int(sh.control[C.WRITTEN]) == end and int(sh.control[C.DISPATCHED]) == end
    finally:
        sh.close()
    assert s.log_text().count("does not cut back") == 1
    assert not os.path.exists(os.path.join(s.cfg.root, "quarantine"))
