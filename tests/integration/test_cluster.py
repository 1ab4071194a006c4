"""A cluster of appliances, as RocketMQ scales out (issue #52): two broker groups, each a master
appliance and a slave appliance (four appliances on one host: separate ports, stores and shm
prefixes), registered with two name servers, driven by the real Java 4.9.8 client.  A topic made
on the cluster has queues on both groups; the producer spreads its sends over them; one consumer
group's two members share every queue; a killed master's sends move to the other group and its
queues are read from its slave; a third group that joins takes its share; ``appliance cluster``
shows the whole of it."""
from __future__ import annotations

import collections
import os
import subprocess
import sys
import time

from tests.integration import javaclient
from tests.integration.harness import ROOT
from tests.integration.test_failover import _name_server, _until
from tests.integration.test_slave import caught_up

FILE = 1 << 20


def _java(classes: str, tmp_path, main: str, *args: str, out: str) -> subprocess.Popen:
    env = dict(os.environ, RMQ_CP=classes, RMQ_CLIENT_LOGS=str(tmp_path / f"jlogs-{out}"))
    return subprocess.Popen([javaclient.RMQ, "java", main, *args], env=env, stdout=open(tmp_path / out, "w"),
                            stderr=subprocess.STDOUT)


def _produce(classes: str, tmp_path, ns: str, prefix: str, count: int) -> collections.Counter:
    """Run the Java producer to its end -> acknowledged sends by broker name; every send acknowledged."""
    p = _java(classes, tmp_path, "ClusterProducer", ns, "Spread", prefix, str(count), out=f"{prefix}.out")
    assert p.wait(180) == 0
    lines = (tmp_path / f"{prefix}.out").read_text().splitlines()
    ok = [line.split() for line in lines if line.startswith("ok ")]
    assert len(ok) == count, [line for line in lines if not line.startswith("ok ")][:5]
    return collections.Counter(broker for _ok, broker, _key in ok)


def _members(ns: str, group: str) -> int:
    """How many members of ``group`` the brokers know (our admin client, as mqadmin consumerConnection)."""
    import asyncio

    from rocketbox.client.admin import Admin
    from rocketbox.client.errors import MQClientError

    async def count() -> int:
        try:
            async with Admin(ns) as admin:
                return len((await admin.consumer_connection(group)).connections)
        except MQClientError:
            return 0
    return asyncio.run(count())


def _topic_create(app, ns: str) -> str:
    p = subprocess.run([sys.executable, "-m", "rocketbox.appliance", "topic-create", "-c", "Cl", "-t", "Spread",
                        "-r", "4", "-w", "4", "-n", ns, "--config", app.conf], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_two_broker_groups_share_a_topic_survive_a_dead_master_and_take_in_a_third(appliance_factory, java_classes,
                                                                                   tmp_path):
    ns1_proc, ns1 = _name_server(tmp_path / "1")
    ns2_proc, ns2 = _name_server(tmp_path / "2")
    ns = f"{ns1};{ns2}"
    common = {"namesrvAddr": ns, "startNameServer": "false", "brokerClusterName": "Cl",
              "mappedFileSizeCommitLog": str(FILE)}
    consumers: list[subprocess.Popen] = []
    try:
        a = appliance_factory(brokerName="broker-a", **common).start()
        a_slave = appliance_factory(brokerName="broker-a", brokerRole="SLAVE", brokerId="1", **common).start()
        b = appliance_factory(brokerName="broker-b", **common).start()
        appliance_factory(brokerName="broker-b", brokerRole="SLAVE", brokerId="1", **common).start()
        out = _topic_create(a, ns1)
        assert out.count("success") == 2, out                        # both masters, as mqadmin updateTopic -c

        def start_consumers() -> list[str]:
            names = [f"c{len(consumers)}.out", f"c{len(consumers) + 1}.out"]
            for name in names:
                consumers.append(_java(java_classes, tmp_path, "FailoverConsumer", ns, "Spread", "cg", "240000",
                                       out=name))
            return names

        def seen(names) -> list[collections.Counter]:
            return [collections.Counter(line[5:] for line in (tmp_path / n).read_text().splitlines()
                                        if line.startswith("body=")) for n in names]

        def all_of(names, prefix: str, count: int) -> bool:
            got = set().union(*seen(names))
            return all(f"{prefix}-{i}" in got for i in range(count))

        first = start_consumers()
        _until(lambda: _members(ns, "cg") == 2, 60, lambda: _members(ns, "cg"))
        time.sleep(3)                                                # (their rebalance shares the queues)
        by_broker = _produce(java_classes, tmp_path, ns, "p1", 200)
        assert set(by_broker) == {"broker-a", "broker-b"} and min(by_broker.values()) >= 50, by_broker
        _until(lambda: all_of(first, "p1", 200), 90, lambda: [len(c) for c in seen(first)])
        assert all(len(c) > 0 for c in seen(first)), [len(c) for c in seen(first)]     # the group shares the queues
        for c in consumers:
            c.kill()
            c.wait()
        # messages waiting on both groups, then broker-a's master dies: sends go to broker-b, and
        # consumers read broker-a's queues from its slave
        waiting = _produce(java_classes, tmp_path, ns, "p2", 100)
        assert waiting["broker-a"] > 0
        caught_up(a, a_slave)
        a.kill9()
        after = _produce(java_classes, tmp_path, ns, "p3", 100)
        assert set(after) == {"broker-b"}, after
        second = start_consumers()
        _until(lambda: all_of(second, "p2", 100) and all_of(second, "p3", 100), 120,
               lambda: [len(c) for c in seen(second)])
        # a third group joins: the topic made on it too; producers and consumers take it in
        c3 = appliance_factory(brokerName="broker-c", **common).start()
        out = _topic_create(c3, ns2)
        assert out.count("success") == 2, out                        # broker-b's and broker-c's masters
        time.sleep(3)                                                # (the producer's first route has it)
        joined = _produce(java_classes, tmp_path, ns, "p4", 120)
        assert set(joined) == {"broker-b", "broker-c"}, joined
        _until(lambda: all_of(second, "p4", 120), 120, lambda: [len(c) for c in seen(second)])
        listing = subprocess.run([sys.executable, "-m", "rocketbox.appliance", "cluster", "-n", ns, "-c", b.conf],
                                 cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
        rows = {(line.split()[1], line.split()[2]): line.rstrip() for line in listing.splitlines()[1:]}
        assert sorted(rows) == [("broker-a", "1"), ("broker-b", "0"), ("broker-b", "1"), ("broker-c", "0")], listing
        assert rows[("broker-b", "1")].endswith(" ms"), listing       # a slave's lag behind its master
        assert all(rows[k].endswith(" -") for k in rows if k != ("broker-b", "1")), listing   # masters; a's is gone
    finally:
        for c in consumers:
            c.kill()
        for p in (ns1_proc, ns2_proc):
            p.terminate()
            p.wait(10)
