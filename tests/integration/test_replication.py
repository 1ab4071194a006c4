"""Replication (issue #52, first step): a rocketbox master's replicator speaks RocketMQ 4.9.8's HA
protocol on listenPort + 1, so the real RocketMQ 4.9.8 slave replicates from it and ends with a
CommitLog byte-identical to the master's, and the master's control block holds what the slave acked."""
from __future__ import annotations

import os
import time

import pytest

from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.shm.layout import C
from rocketbox.store.mappedfile import offset_to_name
from tests.integration import realrocketmq
from tests.integration.test_readers import send_v2
from tests.integration.wire import Wire

pytestmark = pytest.mark.skipif(realrocketmq.missing() is not None, reason=realrocketmq.missing() or "")
FILE = 1 << 20


def _same_prefix(master_dir: str, slave_dir: str, end: int) -> bool:
    """The slave's CommitLog holds the master's bytes [0, end)."""
    at = 0
    while at < end:
        name = offset_to_name(at - at % FILE)
        n = min(end, at - at % FILE + FILE) - at
        try:
            with open(os.path.join(master_dir, name), "rb") as a, open(os.path.join(slave_dir, name), "rb") as b:
                a.seek(at % FILE)
                b.seek(at % FILE)
                if a.read(n) != b.read(n):
                    return False
        except FileNotFoundError:
            return False
        at += n
    return True


def test_the_real_rocketmq_slave_replicates_a_rocketbox_master_byte_for_byte(appliance_factory, tmp_path):
    app = appliance_factory(mappedFileSizeCommitLog=str(FILE), maxMessageSize="65536").start()
    w = Wire("127.0.0.1", app.cfg.listenPort)
    try:
        for i in range(300):                                         # two files and a bit before the slave comes
            assert send_v2(w, "Replicated", os.urandom(8000), f"KEYS\x01k{i}").code == RC.SUCCESS
        slave = realrocketmq.RealRocketMQ(tmp_path, brokerName=app.cfg.brokerName, brokerId=1, brokerRole="SLAVE",
                                          haMasterAddress=f"127.0.0.1:{app.cfg.listenPort + 1}",
                                          mappedFileSizeCommitLog=FILE)
        try:
            sh = app.shared()
            slave_dir = os.path.join(slave.dir, "store", "commitlog")
            deadline = time.monotonic() + 60
            while not _same_prefix(app.cfg.commitlog_dir, slave_dir, int(sh.control[C.WRITTEN])):
                assert time.monotonic() < deadline, slave.log_tail()
                time.sleep(0.5)
            for i in range(100):                                     # and what comes while it is connected
                assert send_v2(w, "Replicated", os.urandom(3000), f"KEYS\x01more{i}").code == RC.SUCCESS
            end = int(sh.control[C.WRITTEN])
            while not (_same_prefix(app.cfg.commitlog_dir, slave_dir, end) and int(sh.control[C.SLAVE_ACKED]) >= end):
                assert time.monotonic() < deadline + 30, (int(sh.control[C.SLAVE_ACKED]), end, slave.log_tail())
                time.sleep(0.2)
            assert end > 2 * FILE
            sh.close()
        finally:
            slave.stop()
    finally:
        w.close()
    assert "replicator: slave" in app.log_text()
