"""A rocketbox slave of a rocketbox master (issue #52): two appliances on one host, one name
server.  The slave learns its master from the name server's answer to its registration, copies
the CommitLog byte for byte through its writer (its dispatcher building the consume queues), and
copies the topics, consumer offsets, delay offsets and groups every 10 s; it refuses sends as
4.9.8's slave does and serves pulls of what it copied."""
from __future__ import annotations

import json
import os
import socket
import time

from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.replicator import protocol as HA
from rocketbox.shm.layout import C
from rocketbox.store import message
from tests.integration.test_readers import bodies, frozen, pull, pull_n, send_v2
from tests.integration.test_replication import FILE, _same_prefix
from tests.integration.wire import Wire

SLAVE_REMARK = ("service not available now. It may be caused by one of the following reasons: the broker's disk is "
                "full [CL:")


def pair(appliance_factory, **master):
    m = appliance_factory(namesrv=True, mappedFileSizeCommitLog=str(FILE), **master).start()
    s = appliance_factory(brokerRole="SLAVE", brokerId="1", namesrvAddr=m.namesrv, startNameServer="false",
                          mappedFileSizeCommitLog=str(FILE)).start()
    return m, s


def caught_up(m, s, timeout: float = 30.0) -> int:
    """Until the slave's CommitLog is the master's, dispatched, and acked to the master; -> its end."""
    msh, ssh = m.shared(), s.shared()
    try:
        deadline = time.monotonic() + timeout
        while True:
            end = int(msh.control[C.WRITTEN])
            if (int(ssh.control[C.DISPATCHED]) == end and int(msh.control[C.SLAVE_ACKED]) == end
                    and _same_prefix(m.cfg.commitlog_dir, s.cfg.commitlog_dir, end)):
                return end
            assert time.monotonic() < deadline, (end, int(ssh.control[C.WRITTEN]), int(ssh.control[C.DISPATCHED]),
                                                 int(msh.control[C.SLAVE_ACKED]))
            time.sleep(0.1)
    finally:
        msh.close()
        ssh.close()


def test_a_rocketbox_slave_copies_its_master_and_serves_reads_not_sends(appliance_factory):
    m, s = pair(appliance_factory)
    w, ws = Wire("127.0.0.1", m.cfg.listenPort), Wire("127.0.0.1", s.cfg.listenPort)
    try:
        sent = [os.urandom(5000 + i) for i in range(400)]         # two files and a bit: file ends and BLANKs
        for i, body in enumerate(sent):
            assert send_v2(w, "Copied", body, f"KEYS\x01k{i}", queue=i % 2).code == RC.SUCCESS
        end = caught_up(m, s)
        assert end > 2 * FILE
        # the master's topics come with the metadata copy (every 10 s, the first 3 s after the start)
        deadline = time.monotonic() + 20
        while pull(ws, "Copied", 0).code != RC.SUCCESS:
            assert time.monotonic() < deadline, s.log_text()[-2000:]
            time.sleep(0.5)
        got = []
        for q in (0, 1):
            at = 0
            while batch := bodies(pull(ws, "Copied", at, queue=q)):
                got += batch
                at += len(batch)
        assert sorted(got) == sorted(sent)
        # the lag, as the master's runtime info and ``appliance cluster`` show it: none now; with the
        # slave's replicator stopped, bytes and ms grow; back to none once it runs again
        def ha() -> dict:
            return json.loads(w.call(R.GET_BROKER_RUNTIME_INFO).body)["table"]
        deadline = time.monotonic() + 5
        while (t := ha())["haSlaveLagBytes"] != "0" or t["haSlaveLagMs"] != "0":
            assert time.monotonic() < deadline, t
            time.sleep(0.2)
        assert t["haSlaveCount"] == "1" and t["haPush2SlaveMaxOffset"] == str(end)
        out = m.cmd("cluster")
        rows = {line.split()[2]: line for line in out.stdout.splitlines()[1:]}
        assert rows["0"].rstrip().endswith(" -") and rows["1"].rstrip().endswith("0 B, 0 ms"), out.stdout
        with frozen(s, "replicator"):
            for i in range(20):
                assert send_v2(w, "Copied", b"while it sleeps").code == RC.SUCCESS
            time.sleep(2.2)
            t = ha()
            from tests.integration.test_metrics import scrape
            lags = {dict(labels)["slave"]: v for (name, labels), v in scrape(m).items()
                    if name == "rocketbox_replica_lag_bytes"}   # each slave's, by its address
        assert int(t["haSlaveLagBytes"]) > 20 * 100 and int(t["haSlaveLagMs"]) >= 1000, t
        assert len(lags) == 1 and list(lags.values())[0] >= 20 * 100 and list(lags)[0].startswith("127.0.0.1:"), lags
        caught_up(m, s)
        refused = send_v2(ws, "Copied", b"to the slave")
        assert (refused.code, refused.remark[:len(SLAVE_REMARK)]) == (RC.SERVICE_NOT_AVAILABLE, SLAVE_REMARK)
        # a committed offset on the master reaches the slave with the next copy
        assert w.call(R.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g1", "topic": "Copied", "queueId": "1",
                                                 "commitOffset": "123"}).code == RC.SUCCESS
        deadline = time.monotonic() + 25
        while (r := ws.call(R.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g1", "topic": "Copied", "queueId": "1"})
               ).code != RC.SUCCESS or r.ext.get("offset") != "123":
            assert time.monotonic() < deadline, (r.code, r.ext)
            time.sleep(0.5)
    finally:
        w.close()
        ws.close()
    assert "replicator: replicating from master" in s.log_text()


def test_a_slave_drops_a_master_that_sends_what_is_not_records_and_writes_none_of_it(appliance_factory, tmp_path):
    """An HA peer sending garbage: a fake master on a port of its own sends a chunk of junk at
    the slave's offset; the slave drops the connection, writes nothing, and connects again."""
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    s = appliance_factory(brokerRole="SLAVE", brokerId="1", haMasterAddress=f"127.0.0.1:{port}").start()
    try:
        srv.settimeout(10)
        for _attempt in range(2):                                   # it comes back after being dropped
            conn, _ = srv.accept()
            conn.settimeout(10)
            report = conn.recv(8)
            assert HA.REPORT.unpack(report)[0] == 0                 # at once, not after 5 s
            junk = os.urandom(4096)
            conn.sendall(b"".join(HA.chunk(0, junk)))
            time.sleep(0.3)
            conn.close()
        sh = s.shared()
        assert int(sh.control[C.WRITTEN]) == 0
        sh.close()
    finally:
        srv.close()
    assert "no record at offset 0" in s.log_text()


def _end_of(resp) -> int:
    """The CommitLog offset just past the message a send response names (its offsetMsgId)."""
    _ip, _port, phys = message.parse_offset_msg_id(resp.ext["msgId"])
    return phys


def test_sync_master_answers_once_a_slave_has_the_message(appliance_factory):
    m = appliance_factory(namesrv=True, mappedFileSizeCommitLog=str(FILE), brokerRole="SYNC_MASTER", slaveTimeout="700").start()
    w = Wire("127.0.0.1", m.cfg.listenPort)
    msh = m.shared()
    try:
        # no slave: SLAVE_NOT_AVAILABLE at once, the message stored all the same
        t0 = time.monotonic()
        alone = send_v2(w, "Sync", b"before any slave")
        assert alone.code == RC.SLAVE_NOT_AVAILABLE and time.monotonic() - t0 < 0.5, (alone.code, alone.remark)
        assert alone.ext["queueOffset"] == "0" and alone.ext["msgId"]
        assert pull_n(w, "Sync", 1) == [b"before any slave"]
        s = appliance_factory(brokerRole="SLAVE", brokerId="1", namesrvAddr=m.namesrv, startNameServer="false",
                              mappedFileSizeCommitLog=str(FILE)).start()
        ssh = s.shared()
        try:
            deadline = time.monotonic() + 20
            while int(msh.control[C.SLAVE_COUNT]) == 0:
                assert time.monotonic() < deadline, s.log_text()[-2000:]
                time.sleep(0.1)
            for i in range(200):                      # each acknowledged send is on the slave when its ack comes
                r = send_v2(w, "Sync", os.urandom(2000), f"KEYS\x01s{i}")
                assert r.code == RC.SUCCESS, (r.code, r.remark)
                phys = _end_of(r)
                assert int(ssh.control[C.WRITTEN]) > phys and int(msh.control[C.SLAVE_ACKED]) > phys
            # a slave that stops reading: FLUSH_SLAVE_TIMEOUT after slaveTimeout; stored on the master
            with frozen(s, "replicator"):
                t0 = time.monotonic()
                late = send_v2(w, "Sync", b"slave asleep")
                took = time.monotonic() - t0
            assert late.code == RC.FLUSH_SLAVE_TIMEOUT and 0.6 < took < 3, (late.code, took)
            assert bodies(pull(w, "Sync", 201)) == [b"slave asleep"]
            # awake again, it catches up, and sends are acknowledged as before
            assert send_v2(w, "Sync", b"awake").code == RC.SUCCESS
        finally:
            ssh.close()
    finally:
        msh.close()
        w.close()
