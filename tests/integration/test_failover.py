"""Failover reads (issue #52): a master appliance and its slave appliance register with a name
server of their own.  When the master is killed, the real Java 4.9.8 consumer and our Python
consumer read its queues from the slave; when it comes back they read from it again, and the
slave copies what it took meanwhile."""
from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
import time

from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.shm.layout import C, S
from tests.integration import javaclient
from tests.integration.harness import ROOT, create_topic, next_port
from tests.integration.test_readers import pull, send_v2
from tests.integration.test_slave import caught_up
from tests.integration.wire import Wire

FILE = 1 << 20


def _name_server(tmp_path) -> tuple[subprocess.Popen, str]:
    """A name server alone (``appliance run nameserver``), outlives the brokers' kills."""
    addr = f"127.0.0.1:{next_port()}"
    tmp_path.mkdir(parents=True, exist_ok=True)
    conf = tmp_path / "ns.conf"
    conf.write_text(f"namesrvAddr={addr}\nstorePathRootDir={tmp_path / 'ns'}\nlistenPort={next_port()}\n")
    log = open(tmp_path / "ns.log", "ab")
    p = subprocess.Popen([sys.executable, "-m", "rocketbox.appliance", "run", "nameserver", "-c", str(conf)],
                         cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    host, _, port = addr.partition(":")
    deadline = time.monotonic() + 15
    while True:
        try:
            Wire(host, int(port), timeout=1).close()
            return p, addr
        except OSError:
            assert p.poll() is None and time.monotonic() < deadline, (tmp_path / "ns.log").read_text()
            time.sleep(0.1)


def _broker_ids(ns: str, topic: str) -> set[int]:
    host, _, port = ns.partition(":")
    w = Wire(host, int(port))
    try:
        resp = w.call(R.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        if resp.code != RC.SUCCESS:
            return set()
        import json

        from rocketbox.store.configfile import loads_tolerant
        data = loads_tolerant(resp.body.decode()) if resp.body else json.loads("{}")
        return {int(k) for bd in data.get("brokerDatas") or [] for k in (bd.get("brokerAddrs") or {})}
    finally:
        w.close()


def _until(what, timeout: float, why) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, why()
        time.sleep(0.2)


def test_consumers_read_a_dead_masters_queues_from_its_slave_and_come_back(appliance_factory, java_classes, tmp_path):
    from rocketbox.client.consumer import PushConsumer
    ns_proc, ns = _name_server(tmp_path)
    try:
        m = appliance_factory(namesrvAddr=ns, startNameServer="false", mappedFileSizeCommitLog=str(FILE)).start()
        s = appliance_factory(brokerRole="SLAVE", brokerId="1", namesrvAddr=ns, startNameServer="false",
                              mappedFileSizeCommitLog=str(FILE)).start()
        create_topic(m, "Fail", 2)
        w = Wire("127.0.0.1", m.cfg.listenPort)
        first = [b"a%d" % i for i in range(100)]
        for i, body in enumerate(first):
            assert send_v2(w, "Fail", body, queue=i % 2).code == RC.SUCCESS
        w.close()
        caught_up(m, s)
        ws = Wire("127.0.0.1", s.cfg.listenPort)                     # the slave has the topic (its 10 s copy)
        _until(lambda: pull(ws, "Fail", 0).code == RC.SUCCESS, 20, lambda: s.log_text()[-2000:])
        ws.close()
        m.kill9()
        _until(lambda: _broker_ids(ns, "Fail") == {1}, 10, lambda: _broker_ids(ns, "Fail"))

        out = tmp_path / "java.out"
        java = subprocess.Popen([javaclient.RMQ, "java", "FailoverConsumer", ns, "Fail", "gj", "90000"],
                                env=dict(os.environ, RMQ_CP=java_classes, RMQ_CLIENT_LOGS=str(tmp_path / "jlogs")),
                                stdout=open(out, "w"), stderr=subprocess.STDOUT)

        def java_seen() -> set[bytes]:
            return {line[5:].encode() for line in out.read_text().splitlines() if line.startswith("body=")}

        py_seen: set[bytes] = set()

        async def send_and_consume(prefix: bytes, n: int, timeout: float) -> list[bytes]:
            """``n`` messages sent to the master, until both consumers have them all."""
            w = Wire("127.0.0.1", m.cfg.listenPort)
            bodies = [prefix + b"%d" % i for i in range(n)]
            for i, body in enumerate(bodies):
                assert send_v2(w, "Fail", body, queue=i % 2).code == RC.SUCCESS
            w.close()
            deadline = time.monotonic() + timeout
            while not (set(bodies) <= py_seen and set(bodies) <= java_seen()) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert set(bodies) <= py_seen, sorted(set(bodies) - py_seen)[:5]
            assert set(bodies) <= java_seen(), (sorted(set(bodies) - java_seen())[:5], out.read_text()[-2000:])
            return bodies

        async def run():
            c = PushConsumer("gp", ns, consume_from="CONSUME_FROM_FIRST_OFFSET")
            c.subscribe("Fail", "*").register(lambda msgs: py_seen.update(x.body for x in msgs) or True)
            await c.start()
            try:
                for _ in range(600):                                 # the master dead: both read the slave
                    if set(first) <= py_seen and set(first) <= java_seen():
                        break
                    await asyncio.sleep(0.1)
                assert set(first) <= py_seen, len(py_seen)
                assert set(first) <= java_seen(), (len(java_seen()), out.read_text()[-2000:])
                m.start()                                            # the master is back
                _until(lambda: _broker_ids(ns, "Fail") == {0, 1}, 40, lambda: _broker_ids(ns, "Fail"))
                msh = m.shared()
                try:
                    await send_and_consume(b"b", 100, 60)
                    # the consumers go back to the master: a round of messages sent there is read from
                    # there by both groups (a pull already held on the slave may take a round's share
                    # until it ends, within 15 s: the rounds go on until one is all the master's)
                    deadline = time.monotonic() + 60
                    for r in itertools.count():
                        before = int(msh.slots[:, S.PULLED_MSGS].sum())
                        last_ones = await send_and_consume(b"c%d-" % r, 20, 30)
                        if int(msh.slots[:, S.PULLED_MSGS].sum()) - before >= 2 * len(last_ones):   # both groups
                            break
                        assert time.monotonic() < deadline, "the consumers still read from the slave"
                finally:
                    msh.close()
            finally:
                await c.shutdown()
        try:
            asyncio.run(run())
        finally:
            java.kill()
            java.wait()
        caught_up(m, s)                                              # the slave resumed
        ssh = s.shared()
        assert int(ssh.control[C.WRITTEN]) > 0
        ssh.close()
    finally:
        ns_proc.terminate()
        ns_proc.wait(10)
