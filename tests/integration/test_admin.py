"""What operators read from a whole appliance: GET_TOPIC_STATS_INFO and GET_CONSUME_STATS in the
body form Java's admin tools parse (a map keyed by MessageQueue object literals), through
``client.admin`` and the ``appliance topic-status`` / ``progress`` commands."""
from __future__ import annotations

import asyncio
import json
import re
import struct

from client.admin import Admin
from client.consumer import PullConsumer
from client.errors import MQBrokerError
from client.instance import MessageQueue
from client.message import Message
from client.producer import Producer
from remoting import mqtable
from remoting.codes import RequestCode as R, ResponseCode as RC
from store import message
from tests.integration.harness import create_topic, dispatched
from tests.integration.wire import Wire

TOPIC, GROUP = "Stats", "stats_group"


def store_time(w: Wire, topic: str, qid: int, offset: int) -> int:
    """A queue's message's store time, read from the record itself (VIEW_MESSAGE_BY_ID of its
    physical offset, found by a pull)."""
    resp = w.call(R.PULL_MESSAGE, {"consumerGroup": "probe", "topic": topic, "queueId": str(qid),
                                   "queueOffset": str(offset), "maxMsgNums": "1", "sysFlag": "0",
                                   "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "0"})
    sys_flag = struct.unpack_from(">i", resp.body, message.SYSFLAG_AT)[0]
    return struct.unpack_from(">q", resp.body, message.store_ts_at(sys_flag))[0]


def test_topic_and_consume_stats_say_where_each_queue_and_group_is(appliance_factory):
    app = appliance_factory(namesrv=True).start()
    create_topic(app, TOPIC, 4)
    w = Wire("127.0.0.1", app.cfg.listenPort)

    async def run():
        async with Producer("pg", app.namesrv) as p:
            await p.instance.route(TOPIC, refresh=True)
            sent = {q: 0 for q in range(4)}
            for i in range(30):                      # 12, 9, 6 and 3 messages on queues 0..3
                qid = 0 if i < 12 else 1 if i < 21 else 2 if i < 27 else 3
                await p.send(Message(TOPIC, b"m%d" % i), queue=MessageQueue(TOPIC, "b1", qid))
                sent[qid] += 1
        await dispatched(app)
        pc = await PullConsumer(GROUP, app.namesrv).start()
        try:
            mqs = await pc.queues(TOPIC)
            await pc.assign(mqs)
            for mq in mqs[:2]:                       # the group consumes 5 of queue 0 and all 9 of queue 1
                got = await pc.pull(mq, max_nums=5 if mq.queue_id == 0 else 32)
                assert len(got.messages) == (5 if mq.queue_id == 0 else 9)
            await pc.commit()
        finally:
            await pc.shutdown()
        async with Admin(app.namesrv) as admin:
            return sent, await admin.topic_status(TOPIC), await admin.consume_progress(GROUP), \
                await admin.consume_progress(GROUP, TOPIC)

    sent, status, progress, progress_one = asyncio.run(run())
    assert list(status) == [MessageQueue(TOPIC, "b1", q) for q in range(4)]
    assert [(s.min_offset, s.max_offset) for s in status.values()] == [(0, sent[q]) for q in range(4)]
    for q, s in enumerate(status.values()):
        assert s.last_update_ms == store_time(w, TOPIC, q, sent[q] - 1)
    # the group has offsets on this topic only: 4 queues, committed 5, 9, 0, 0
    assert list(progress.queues) == [MessageQueue(TOPIC, "b1", q) for q in range(4)]
    assert [(p.broker_offset, p.consumer_offset) for p in progress.queues.values()] == \
        [(12, 5), (9, 9), (6, 0), (3, 0)]
    assert progress.diff_total == 7 + 0 + 6 + 3
    assert [p.last_ms for p in progress.queues.values()] == \
        [store_time(w, TOPIC, 0, 4), store_time(w, TOPIC, 1, 8), 0, 0]
    assert progress_one == progress


def test_stats_bodies_are_in_the_form_java_tools_parse_and_bad_requests_get_codes(appliance_factory):
    app = appliance_factory().start()
    create_topic(app, TOPIC, 2)
    w = Wire("127.0.0.1", app.cfg.listenPort)
    resp = w.call(R.GET_TOPIC_STATS_INFO, {"topic": TOPIC})
    assert resp.code == RC.SUCCESS
    assert resp.body == (b'{"offsetTable":{{"brokerName":"b1","queueId":0,"topic":"Stats"}:{"lastUpdateTimestamp":0,'
                         b'"maxOffset":0,"minOffset":0},{"brokerName":"b1","queueId":1,"topic":"Stats"}:'
                         b'{"lastUpdateTimestamp":0,"maxOffset":0,"minOffset":0}}}')
    resp = w.call(R.GET_TOPIC_STATS_INFO, {"topic": "NoSuchTopic"})
    assert (resp.code, resp.remark) == (RC.TOPIC_NOT_EXIST, "topic[NoSuchTopic] not exist")
    resp = w.call(R.GET_TOPIC_STATS_INFO, {})
    assert resp.code == RC.SYSTEM_ERROR and "topic" in resp.remark
    # a group with no offsets anywhere: an empty table (the admin tool then says the group is not online)
    resp = w.call(R.GET_CONSUME_STATS, {"consumerGroup": "nobody"})
    assert (resp.code, resp.body) == (RC.SUCCESS, b'{"consumeTps":0.0,"offsetTable":{}}')
    # an offset committed through one reader is in the stats every reader gives
    assert w.call(R.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g9", "topic": TOPIC, "queueId": "1",
                                             "commitOffset": "0"}).code == RC.SUCCESS
    for port in (app.cfg.reader_port(0), app.cfg.reader_port(1)):
        body = Wire("127.0.0.1", port).call(R.GET_CONSUME_STATS, {"consumerGroup": "g9"}).body
        fields, table = mqtable.decode(body, "offsetTable")
        assert fields == {"consumeTps": 0.0}
        assert table == {(TOPIC, "b1", q): {"brokerOffset": 0, "consumerOffset": 0, "lastTimestamp": 0}
                         for q in range(2)}
    # a topic named that the broker does not have: nothing for it
    resp = w.call(R.GET_CONSUME_STATS, {"consumerGroup": "g9", "topic": "NoSuchTopic"})
    assert resp.body == b'{"consumeTps":0.0,"offsetTable":{}}'


def test_the_cli_prints_topic_status_and_progress(appliance_factory):
    app = appliance_factory(namesrv=True).start()
    create_topic(app, TOPIC, 2)

    async def run():
        async with Producer("pg", app.namesrv) as p:
            await p.instance.route(TOPIC, refresh=True)
            for i in range(5):
                await p.send(Message(TOPIC, b"x"), queue=MessageQueue(TOPIC, "b1", 1))
        await dispatched(app)
        pc = await PullConsumer(GROUP, app.namesrv).start()
        try:
            mq = MessageQueue(TOPIC, "b1", 1)
            await pc.assign([mq])
            assert len((await pc.pull(mq, max_nums=2)).messages) == 2
            await pc.commit(mq)
        finally:
            await pc.shutdown()

        idle = await PullConsumer("idle", app.namesrv).start()
        try:
            await idle.queues(TOPIC)                          # a member (its retry topic is made)
            ids = await idle.instance.call(app.addr, R.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "idle"})
            assert json.loads(ids.body) == {"consumerIdList": [idle.instance.client_id]}
        finally:
            await idle.shutdown()

    asyncio.run(run())
    out = app.cmd("topic-status", "-t", TOPIC)
    assert out.returncode == 0, out.stderr
    rows = [line.split()[:4] for line in out.stdout.splitlines()[1:]]
    assert rows == [["b1", "0", "0", "0"], ["b1", "1", "0", "5"]]
    out = app.cmd("progress", "-g", GROUP)
    assert out.returncode == 0, out.stderr
    rows = [line.split()[:6] for line in out.stdout.splitlines()[1:] if line.startswith(TOPIC)]
    assert rows == [[TOPIC, "b1", "0", "0", "0", "0"], [TOPIC, "b1", "1", "5", "2", "3"]]
    assert re.search(r"^Diff Total: 3$", out.stdout, re.M)
    out = app.cmd("progress", "-g", "nobody")                 # a group no broker has met
    assert out.returncode == 1 and "TOPIC_NOT_EXIST" in out.stderr and "consumer group nobody" in out.stderr
    out = app.cmd("progress", "-g", "idle")                   # met, but it has no offsets
    assert out.returncode == 1 and "CONSUMER_NOT_ONLINE" in out.stderr
    out = app.cmd("topic-status", "-t", "NoSuchTopic")
    assert out.returncode == 1 and "TOPIC_NOT_EXIST" in out.stderr
