"""Replication (issue #52, first step): a rocketbox master's replicator speaks RocketMQ 4.9.8's HA
protocol on listenPort + 1, so the real RocketMQ 4.9.8 slave replicates from it and ends with a
CommitLog byte-identical to the master's, and the master's control block holds what the slave acked."""
from __future__ import annotations

import os
import time

import pytest

from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.shm.layout import C
from rocketbox.store.mappedfile import offset_to_name
from tests.integration import realrocketmq
from tests.integration.test_readers import send_v2
from tests.integration.wire import Wire

pytestmark = pytest.mark.skipif(realrocketmq.missing() is not None, reason=realrocketmq.missing() or "")
FILE = 1 << 20


def _same_prefix(master_dir: str, slave_dir: str, end: int, start: int = 0) -> bool:
    """The slave's CommitLog holds the master's bytes [start, end)."""
    at = start
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


def test_a_rocketbox_slave_replicates_the_real_rocketmq_master_byte_for_byte(appliance_factory, tmp_path):
    """The other way round: the real 4.9.8 master (with its name server); our slave learns the
    master's HA address from the name server's answer to its registration.  Started empty once
    the master has two files and a bit, it gets the master's last file only (4.9.8's master
    sends an empty slave no more), copies on across file ends, and copies the topics (the real
    master's GET_ALL_TOPIC_CONFIG) so that it serves pulls of what it holds."""
    from tests.integration.test_readers import bodies, pull
    real = realrocketmq.RealRocketMQ(tmp_path, namesrv=True, brokerName="b1", mappedFileSizeCommitLog=FILE)
    try:
        real.create_topics(["FromReal"], 2).registered()
        w = Wire("127.0.0.1", real.port)
        sent = [os.urandom(6000 + i) for i in range(600)]
        for i, body in enumerate(sent[:400]):                           # 2.4 MB: files 0, 1 and 2
            assert send_v2(w, "FromReal", body, f"KEYS\x01r{i}", queue=i % 2).code == RC.SUCCESS
        s = appliance_factory(brokerRole="SLAVE", brokerId="1", namesrvAddr=real.namesrv, startNameServer="false",
                              mappedFileSizeCommitLog=str(FILE)).start()
        ws = Wire("127.0.0.1", s.cfg.listenPort)
        sh = s.shared()
        try:
            master_dir = os.path.join(real.dir, "store", "commitlog")
            deadline = time.monotonic() + 60
            while int(sh.control[C.WRITTEN]) == 0:
                assert time.monotonic() < deadline, (s.log_text()[-2000:], real.log_tail())
                time.sleep(0.2)
            for i, body in enumerate(sent[400:], 400):                  # and what comes while it is connected
                assert send_v2(w, "FromReal", body, f"KEYS\x01r{i}", queue=i % 2).code == RC.SUCCESS
            first = min(int(n) for n in os.listdir(s.cfg.commitlog_dir))
            assert first == 2 * FILE
            while True:
                end = int(sh.control[C.WRITTEN])
                if end > 3 * FILE and _same_prefix(master_dir, s.cfg.commitlog_dir, end, first) \
                        and int(sh.control[C.DISPATCHED]) == end:
                    break
                assert time.monotonic() < deadline, (end, s.log_text()[-2000:], real.log_tail())
                time.sleep(0.5)
            got: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(got) < 200:                                       # the topic comes with the metadata copy
                got = []
                for q in (0, 1):
                    low = ws.call(R.GET_MIN_OFFSET, {"topic": "FromReal", "queueId": str(q)})
                    at = int(low.ext.get("offset", 0)) if low.code == RC.SUCCESS else 0   # where the copy began
                    if q == 0 and low.code == RC.SUCCESS:                               # a slave moves no offset:
                        early = pull(ws, "FromReal", 0, queue=q)                       # 20, and from 0 again
                        if early.code != RC.TOPIC_NOT_EXIST:                           # (copied within 10 s)
                            assert (early.code, early.ext["nextBeginOffset"]) == (RC.PULL_RETRY_IMMEDIATELY, "0")
                    while batch := bodies(pull(ws, "FromReal", at, queue=q)):
                        got += batch
                        at += len(batch)
                assert time.monotonic() < deadline, (len(got), s.log_text()[-2000:])
                time.sleep(0.5)
            assert sorted(got) == sorted(sent[len(sent) - len(got):])     # every message the slave's files hold
        finally:
            sh.close()
            w.close()
            ws.close()
    finally:
        real.stop()
