"""Delay levels through the whole appliance (FACTS §9.1): a producer's DELAY=n message is held in
SCHEDULE_TOPIC_XXXX and arrives in the queue it was sent to after level n's delay, not before, with
the properties 4.9.8 gives it; a level past the last is the last; a DELAY that is not a number is
refused with 1 and nothing is stored."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest

from rocketbox.client.errors import MQBrokerError
from rocketbox.client.message import Message
from rocketbox.client.producer import Producer
from rocketbox.remoting.codes import ResponseCode as RC
from tests.integration import javaclient
from tests.integration.harness import ROOT, create_topic, read_topic


async def _producer(app, topic: str) -> Producer:
    p = await Producer("pg", app.namesrv).start()
    await p.send(Message(topic, b"init"))                   # auto-creates the topic
    return p


async def _arrival(app, topic: str, body: bytes, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = [m for m in await read_topic(app, topic) if m.body == body]
        if got:
            return time.time(), got
        await asyncio.sleep(0.05)
    return None, []


def test_a_delay_level_holds_a_message_for_its_delay_then_delivers_it_to_its_queue(appliance_factory):
    app = appliance_factory(namesrv=True, messageDelayLevel="1s 2s 3s").start()

    async def run():
        p = await _producer(app, "Delayed")
        queues = await p.instance.route("Delayed")
        mq = queues.write_queues[3]
        sent_at = time.time()
        res = await p.send(Message("Delayed", b"two-seconds", tags="TagD", delay_level=2), queue=mq)
        assert res.status == "SEND_OK" and res.queue.queue_id == 3          # the queue it was sent to
        over = await p.send(Message("Delayed", b"past-the-last", delay_level=99), queue=mq)
        try:
            await p.send(Message("Delayed", b"bad", properties={"DELAY": "soon"}), queue=mq)
            raise AssertionError("a DELAY that is not a number was taken")
        except MQBrokerError as e:
            assert e.code == RC.SYSTEM_ERROR and "DELAY" in str(e)
        early = [m.body for m in await read_topic(app, "Delayed")]
        arrived, got = await _arrival(app, "Delayed", b"two-seconds")
        late_at, late = await _arrival(app, "Delayed", b"past-the-last")
        await p.shutdown()
        return sent_at, res, over, early, arrived, got, late_at, late

    sent_at, res, over, early, arrived, got, late_at, late = asyncio.run(run())
    assert b"two-seconds" not in early and b"past-the-last" not in early and b"bad" not in early
    assert got and 2.0 <= arrived - sent_at < 2.6, arrived - sent_at        # level 2: 2 s, on time
    m = got[0]
    assert m.queue_id == 3 and m.tags == "TagD" and m.msg_id == res.msg_id
    assert m.properties["DELAY"] == "2" and m.properties["REAL_TOPIC"] == "Delayed" and m.properties["REAL_QID"] == "3"
    assert m.store_timestamp - m.born_timestamp >= 1990
    assert late and late[0].properties["DELAY"] == "3" and 3.0 <= late_at - sent_at < 3.8    # clamped to the last level
    from rocketbox.remoting.codes import RequestCode as R
    from tests.integration.wire import Wire
    w = Wire("127.0.0.1", app.cfg.listenPort)
    try:
        time.sleep(0.2)
        info = json.loads(w.call(R.GET_BROKER_RUNTIME_INFO).body)["table"]
    finally:
        w.close()
    scheduled = asyncio.run(read_topic(app, "SCHEDULE_TOPIC_XXXX"))
    assert sorted((s.queue_id, s.body) for s in scheduled) == [(1, b"two-seconds"), (2, b"past-the-last")]
    assert app.stop() == 0
    text = open(os.path.join(app.cfg.config_dir, "delayOffset.json")).read()
    assert "\t\t2: 1," in text and "\t\t3: 1" in text, text          # both delivered, in RocketMQ's format
    assert info.get("scheduleMessageOffset_3") in ("0,1", "1,1"), info    # (the file is written every 10 s)


def test_the_java_client_gets_a_level_2_message_five_seconds_after_its_send(appliance_factory, java_classes, tmp_path):
    """The real RocketMQ 4.9.8 client with the default levels: level 2 is 5 s (the issue: ± 0.3 s)."""
    app = appliance_factory(namesrv=True).start()
    out = javaclient.run(java_classes, "DelayRoundTrip", app.namesrv, "JavaDelayed", "2", "12000",
                         logs=str(tmp_path / "java-logs"))
    lines = dict(line.split("=", 1) for line in out.split() if "=" in line)
    assert lines["status"] == "SEND_OK" and lines["received"] == "true", out
    assert 4700 <= int(lines["received_after_ms"]) <= 5300, out
    assert lines["delay"] == "2" and lines["real_topic"] == "JavaDelayed" and lines["body"] == "delayed", out
    assert app.stop() == 0


def test_the_java_client_retries_a_failed_message_with_back_off_then_dead_letters_it(appliance_factory, java_classes,
                                                                                     tmp_path):
    """RECONSUME_LATER: the client sends the message back (CONSUMER_SEND_MSG_BACK, delay level 0),
    the broker stores a copy in %RETRY%<group> after level 3 + reconsumeTimes; past the group's
    maxReconsumeTimes (2) the copy goes to %DLQ%<group>, where a consumer reads it.  Levels 3 and 4
    are 1 s and 2 s here (10 s and 30 s by default) to keep the test short.  The group's retry topic
    is made first: a new group's is made at its first heartbeat, and the Java client finds its
    route at its next route poll (every 30 s), with the real broker as with this one."""
    app = appliance_factory(namesrv=True, messageDelayLevel="1s 1s 1s 2s 3s").start()
    create_topic(app, "%RETRY%retry-group", 1)
    out = javaclient.run(java_classes, "RetryRoundTrip", app.namesrv, "Retried", "retry-group", "2", "20000",
                         logs=str(tmp_path / "java-logs"), timeout=120)
    deliveries = [dict(kv.split("=", 1) for kv in line.split()) for line in out.splitlines() if line.startswith("delivery=")]
    assert [d["delivery"] for d in deliveries] == ["0", "1", "2"], out
    assert all(d["topic"] == "Retried" and d["body"] == "retried" for d in deliveries), out    # RETRY_TOPIC restored
    first, second, third = (int(d["after_ms"]) for d in deliveries)
    assert 900 <= second - first <= 1600 and 1900 <= third - second <= 2600, out     # levels 3 and 4
    assert "failed_all=true" in out and "in_dlq=true" in out, out
    dlq = dict(kv.split("=", 1) for line in out.splitlines() if line.startswith("dlq_") for kv in line.split())
    assert dlq["dlq_body"] == "retried" and dlq["dlq_reconsume"] == "3" and dlq["dlq_retry_topic"] == "Retried", out
    assert app.stop() == 0


def test_send_back_on_the_wire_retries_dead_letters_and_refuses_what_it_cannot_find(appliance_factory):
    """CONSUMER_SEND_MSG_BACK's answers (FACTS-wave2 §3): level 0 -> %RETRY%<group> after level
    3 + reconsumeTimes, a negative level -> %DLQ%<group> at once, an offset that holds no message
    -> 1 ``look message by offset failed``; a fallback send to the retry topic at the limit -> the DLQ."""
    from rocketbox.remoting.codes import RequestCode as R
    from rocketbox.store import message as M
    from tests.integration.test_readers import send_v2
    from tests.integration.wire import Wire
    app = appliance_factory(namesrv=True, messageDelayLevel="1s 1s 1s").start()
    w = Wire("127.0.0.1", app.cfg.listenPort)
    try:
        sent = send_v2(w, "Orders", b"give-back", "TAGS\x01T1\x02UNIQ_KEY\x01U-1")
        assert sent.code == RC.SUCCESS, sent.remark
        offset = M.parse_offset_msg_id(sent.ext["msgId"])[2]

        def back(level, at=offset, group="g1"):
            return w.call(R.CONSUMER_SEND_MSG_BACK, {"offset": str(at), "group": group, "delayLevel": str(level),
                                                     "originMsgId": "U-1", "originTopic": "Orders", "maxReconsumeTimes": "3"})
        r = back(-1)
        assert r.code == RC.SUCCESS, r.remark
        r = back(0)
        assert r.code == RC.SUCCESS, r.remark
        r = back(0, at=offset + 1)
        assert r.code == RC.SYSTEM_ERROR and r.remark == f"look message by offset failed, {offset + 1}"
        r = send_v2(w, "%RETRY%g1", b"fallback", "RETRY_TOPIC\x01Orders\x02DELAY\x013", j="16")   # reconsumed 16 times
        assert r.code == RC.SUCCESS, r.remark
        time.sleep(1.5)                                      # level 3 is 1 s here
        dlq = sorted(asyncio.run(read_topic(app, "%DLQ%g1")), key=lambda m: m.body)
        retried = asyncio.run(read_topic(app, "%RETRY%g1"))
    finally:
        w.close()
    assert [m.body for m in dlq] == [b"fallback", b"give-back"]
    m = dlq[1]
    assert m.reconsume_times == 1 and m.properties["RETRY_TOPIC"] == "Orders" and m.properties["DELAY"] == "0"
    assert m.properties["ORIGIN_MESSAGE_ID"] == sent.ext["msgId"] and m.properties["UNIQ_KEY"] == "U-1"
    assert [(r.body, r.reconsume_times, r.properties["DELAY"], r.properties["REAL_TOPIC"]) for r in retried] == [
        (b"give-back", 1, "3", "%RETRY%g1")]

    def cli(*argv):
        return subprocess.run([sys.executable, "-m", "rocketbox.appliance", *argv, "-n", app.namesrv, "-c", app.conf],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
    listed = cli("dlq", "-g", "g1")
    assert listed.returncode == 0 and "2 dead-lettered messages of group g1" in listed.stdout, listed
    assert "msgId=U-1 " in listed.stdout and "topic=Orders reconsumeTimes=1" in listed.stdout, listed.stdout
    resent = cli("dlq-resend", "-g", "g1", "-m", "U-1")
    assert resent.returncode == 0 and resent.stdout.startswith("SEND_OK to Orders: msgId=U-1"), resent
    again = [m for m in asyncio.run(read_topic(app, "Orders")) if m.body == b"give-back"]
    assert len(again) == 2 and "RETRY_TOPIC" not in again[1].properties and again[1].tags == "T1"
    assert cli("dlq-resend", "-g", "g1", "-m", "NOPE").returncode == 1
    waiting = cli("delayed")
    assert waiting.returncode == 0 and "#Waiting" in waiting.stdout, waiting
    assert app.stop() == 0


def test_the_python_push_consumer_gets_a_refused_message_back_through_its_retry_topic(appliance_factory):
    """Our PushConsumer as Java's: it subscribes to %RETRY%<group>, sends a refused message back,
    and gets it again after the back-off with reconsume_times one more and its own topic."""
    from rocketbox.client.consumer import PushConsumer
    app = appliance_factory(namesrv=True, messageDelayLevel="1s 1s 1s 1s").start()
    seen = []

    async def run():
        p = await _producer(app, "Refused")
        c = PushConsumer("refusing", app.namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET")

        def listener(msgs):
            seen.extend((m.body, m.topic, m.reconsume_times, time.time()) for m in msgs if m.body == b"twice")
            return not any(m.body == b"twice" and m.reconsume_times < 2 for m in msgs)
        c.subscribe("Refused", "*").register(listener)
        await c.start()
        await asyncio.sleep(1)
        await p.send(Message("Refused", b"twice"))
        deadline = time.monotonic() + 15
        while len(seen) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.5)                              # no fourth delivery
        await c.shutdown()
        await p.shutdown()

    asyncio.run(run())
    assert [(b, t, n) for b, t, n, _ in seen] == [(b"twice", "Refused", 0), (b"twice", "Refused", 1),
                                                  (b"twice", "Refused", 2)], seen
    assert all(0.9 <= later[3] - earlier[3] <= 2.5 for earlier, later in zip(seen, seen[1:])), seen
    assert app.stop() == 0


def test_an_orderly_consumer_retries_locally_then_dead_letters_at_its_limit(appliance_factory):
    """As Java's orderly consumer: a refused batch blocks its queue and is offered again (reconsume
    count one more each time, no broker call); at max_reconsume_times the message goes to the
    retry topic, which the broker turns into %DLQ%<group>; the queue then moves on."""
    from rocketbox.client.consumer import PushConsumer
    app = appliance_factory(namesrv=True).start()
    seen = []

    async def run():
        p = await _producer(app, "Ordered")
        c = PushConsumer("ordered-group", app.namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET", orderly=True,
                         max_reconsume_times=2)

        def listener(msgs):
            seen.extend((m.body, m.reconsume_times) for m in msgs if m.body != b"init")
            ok = all(m.body != b"poison" for m in msgs)
            if ok and any(m.body == b"after" for m in msgs):
                done.append(True)
            return ok
        done = []
        c.subscribe("Ordered", "*").register(listener)
        await c.start()
        mq = (await p.instance.route("Ordered")).write_queues[0]
        await p.send(Message("Ordered", b"poison"), queue=mq)
        deadline = time.monotonic() + 20
        while len(seen) < 3 and time.monotonic() < deadline:       # (a refused batch counts for all its messages)
            await asyncio.sleep(0.1)
        await p.send(Message("Ordered", b"after"), queue=mq)
        while not done and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        await c.shutdown()
        await p.shutdown()
        return await read_topic(app, "%DLQ%ordered-group")

    dlq = asyncio.run(run())
    assert [s for s in seen if s[0] == b"poison"] == [(b"poison", 0), (b"poison", 1), (b"poison", 2)], seen
    assert seen[-1] == (b"after", 0), seen                           # the queue moved on, past the poison
    assert [(m.body, m.reconsume_times, m.properties["RETRY_TOPIC"]) for m in dlq if m.body != b"init"] == [
        (b"poison", 2, "Ordered")]                                  # (init, if its batch held the poison, too)
    assert app.stop() == 0


@pytest.mark.slow                 # kills: the whole suite, not the fast lane
def test_delayed_messages_survive_kill9_of_the_scheduler_and_of_the_whole_appliance(appliance_factory):
    """Delayed messages pending while the scheduler is killed -9, then the whole appliance: after
    the restarts each acknowledged one is delivered, none before its time; a clean restart after
    that delivers none again."""
    import signal
    app = appliance_factory(namesrv=True, messageDelayLevel="2s 3s").start()
    delays = {"1": 2000, "2": 3000}

    async def send(level: int, n: int, tag: str) -> list[str]:
        p = await _producer(app, "Survivors")
        ids = []
        for k in range(0, n, 50):
            rs = await asyncio.gather(*(p.send(Message("Survivors", f"{tag}-{i}".encode(), delay_level=level))
                                        for i in range(k, min(k + 50, n))))
            ids += [r.msg_id for r in rs if r.status == "SEND_OK"]
        await p.shutdown()
        return ids

    acked = asyncio.run(send(1, 600, "a"))
    os.kill(app.role_pid("scheduler"), signal.SIGKILL)      # before any is due; the supervisor restarts it
    acked += asyncio.run(send(2, 300, "b"))
    time.sleep(2.2)                                         # some level-1 ones delivered, the rest pending
    app.kill9()
    app.start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        got = asyncio.run(read_topic(app, "Survivors"))
        if {m.msg_id for m in got} >= set(acked):
            break
        time.sleep(0.5)
    got = [m for m in got if m.body != b"init"]
    assert len(acked) == 900 and {m.msg_id for m in got} == set(acked)            # none lost
    early = [m for m in got if m.store_timestamp < m.born_timestamp + delays[m.properties["DELAY"]]]
    assert not early, early[:3]
    assert app.stop() == 0
    app.start()
    time.sleep(1.5)
    assert len([m for m in asyncio.run(read_topic(app, "Survivors")) if m.body != b"init"]) == len(got)
    assert app.stop() == 0
