"""What operators read from a whole appliance: GET_TOPIC_STATS_INFO and GET_CONSUME_STATS in the
body form Java's admin tools parse (a map keyed by MessageQueue object literals), a group's members
and a topic's groups (GET_CONSUMER_CONNECTION_LIST, GET_PRODUCER_CONNECTION_LIST,
QUERY_TOPIC_CONSUME_BY_WHO) whichever reader is asked, through ``client.admin`` and the
``appliance topic-status`` / ``progress`` / ``connections`` commands."""
from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import struct
import time

from rocketbox.client.admin import Admin
from rocketbox.client.consumer import PullConsumer, PushConsumer
from rocketbox.client.errors import MQBrokerError
from rocketbox.client.instance import MessageQueue
from rocketbox.client.message import Message
from rocketbox.client.producer import Producer
from rocketbox.remoting import mqtable
from rocketbox.remoting.codec import Command
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.store import message
from rocketbox.store.javahash import string_hash
from tests.integration import exporter
from tests.integration.harness import create_topic, dispatched, owned
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
    rows = [line.split()[:4] for line in out.stdout.split("\n\n")[0].splitlines()[1:]]
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


def test_consume_tps_is_the_messages_a_groups_pulls_found_per_second_on_every_reader(appliance_factory):
    """GET_CONSUME_STATS' consumeTps counts what the group's pulls found, through either reader,
    on the queues it has committed offsets on, per second since the oldest sample (here the
    readers' start): each reader gives the same count, and other groups' pulls are not in it."""
    began = time.monotonic()
    app = appliance_factory().start()
    ready = time.monotonic()
    create_topic(app, TOPIC, 2)
    r0, r1 = (Wire("127.0.0.1", app.cfg.reader_port(i)) for i in (0, 1))
    for group, qid in (("g", 0), ("g", 1), ("other", 0)):
        assert r0.call(R.UPDATE_CONSUMER_OFFSET, {"consumerGroup": group, "topic": TOPIC, "queueId": str(qid),
                                                  "commitOffset": "0"}).code == RC.SUCCESS
    for qid, n in ((0, 10), (1, 6)):
        for i in range(n):
            assert r0.call(R.SEND_MESSAGE, {"producerGroup": "p", "topic": TOPIC, "defaultTopic": "TBW102",
                                            "defaultTopicQueueNums": "4", "queueId": str(qid), "sysFlag": "0",
                                            "bornTimestamp": "0", "flag": "0"}, b"x").code == RC.SUCCESS
    asyncio.run(dispatched(app))

    def pull(w: Wire, group: str, qid: int, offset: int = 0) -> int:
        resp = w.call(R.PULL_MESSAGE, {"consumerGroup": group, "topic": TOPIC, "queueId": str(qid),
                                       "queueOffset": str(offset), "maxMsgNums": "32", "sysFlag": "0",
                                       "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "0"})
        return int(resp.ext["nextBeginOffset"]) - offset if resp.code == RC.SUCCESS else 0

    assert (pull(r0, "g", 0), pull(r1, "g", 1), pull(r1, "g", 0, 7)) == (10, 6, 3)     # 19 found for g
    assert (pull(r1, "other", 1), pull(r0, "no_offsets", 0)) == (6, 10)      # neither counted for g
    time.sleep(max(0.0, 1.2 - (time.monotonic() - ready)))
    for w in (r0, r1, r0):
        asked = time.monotonic()
        fields, _table = mqtable.decode(w.call(R.GET_CONSUME_STATS, {"consumerGroup": "g"}).body, "offsetTable")
        answered = time.monotonic()      # the oldest sample was taken between began and ready
        assert 19 / (answered - began) - 0.01 <= fields["consumeTps"] <= 19 / (asked - ready) + 0.01, \
            (fields, asked - began, asked - ready)
        fields, _table = mqtable.decode(w.call(R.GET_CONSUME_STATS, {"consumerGroup": "other",
                                                                    "topic": TOPIC}).body, "offsetTable")
        assert fields["consumeTps"] == 0.0        # its pull was of queue 1, where it has no offset


def _heartbeat(w: Wire, client_id: str, consumers: list[dict], producers: list[str], **kw) -> None:
    body = json.dumps({"clientID": client_id, "consumerDataSet": consumers,
                       "producerDataSet": [{"groupName": g} for g in producers]}).encode()
    assert w.call(R.HEART_BEAT, body=body, **kw).code == RC.SUCCESS


def _addr(w: Wire) -> str:
    host, port = w.sock.getsockname()
    return f"{host}:{port}"


def _wait_for(what, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while True:
        got = what()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def test_a_groups_members_on_every_reader_are_listed_by_whichever_reader_is_asked(appliance_factory):
    """GET_CONSUMER_CONNECTION_LIST, GET_PRODUCER_CONNECTION_LIST and QUERY_TOPIC_CONSUME_BY_WHO
    answer for the whole appliance: members that sent their heartbeats to different readers are
    listed alike by both, each with the address, language and version it came with; one that
    leaves, closes its connection, or whose reader is killed is no longer listed."""
    app = appliance_factory().start()
    create_topic(app, TOPIC, 2)
    r0, r1 = (Wire("127.0.0.1", app.cfg.reader_port(i)) for i in (0, 1))
    tags = {"topic": TOPIC, "subString": "TagA || TagB", "codeSet": [string_hash("TagA"), string_hash("TagB")],
            "subVersion": 7}
    _heartbeat(r0, "10.0.0.1@java", [{"groupName": "g", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                                      "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "subscriptionDataSet": [tags]}],
               ["pg", "CLIENT_INNER_PRODUCER"], language="JAVA", version=399)
    # the C++ client's dialect: enums as ordinals, subVersion a string, no tagsSet
    _heartbeat(r1, "10.0.0.2@cpp", [{"groupName": "g", "consumeType": 1, "messageModel": 1, "consumeFromWhere": 4,
                                     "subscriptionDataSet": [{**tags, "subVersion": "7"}]}], [], language="CPP", version=5)
    java = {"clientAddr": _addr(r0), "clientId": "10.0.0.1@java", "language": "JAVA", "version": 399}
    cpp = {"clientAddr": _addr(r1), "clientId": "10.0.0.2@cpp", "language": "CPP", "version": 5}
    sub = {"classFilterMode": False, "codeSet": tags["codeSet"], "expressionType": "TAG", "subString": "TagA || TagB",
           "subVersion": 7, "tagsSet": ["TagA", "TagB"], "topic": TOPIC}
    want = {"connectionSet": [java, cpp], "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
            "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING", "subscriptionTable": {TOPIC: sub}}
    for w in (r0, r1):
        resp = w.call(R.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "g"})
        assert resp.code == RC.SUCCESS, resp.remark
        assert json.loads(resp.body) == want
        # fastjson's order: bean keys alphabetical
        assert list(json.loads(resp.body)) == sorted(want) and list(json.loads(resp.body)["connectionSet"][0]) == \
            ["clientAddr", "clientId", "language", "version"]
        resp = w.call(R.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "pg"})
        assert (resp.code, json.loads(resp.body)) == (RC.SUCCESS, {"connectionSet": [java]})
        resp = w.call(R.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": TOPIC})
        assert (resp.code, json.loads(resp.body)) == (RC.SUCCESS, {"groupList": ["g"]})
    resp = r1.call(R.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "nobody"})
    assert (resp.code, resp.remark) == (RC.CONSUMER_NOT_ONLINE, "the consumer group[nobody] not online")
    resp = r1.call(R.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "nobody"})
    assert (resp.code, resp.remark) == (RC.SYSTEM_ERROR, "the producer group[nobody] not exist")
    resp = r1.call(R.GET_CONSUMER_CONNECTION_LIST, {})
    assert resp.code == RC.SYSTEM_ERROR and "consumerGroup" in resp.remark
    # a group with offsets on the topic and no member consumes it too (whichGroupByTopic)
    assert r1.call(R.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g2", "topic": TOPIC, "queueId": "0",
                                              "commitOffset": "0"}).code == RC.SUCCESS
    assert json.loads(r0.call(R.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": TOPIC}).body) == {"groupList": ["g", "g2"]}
    # the C++ member unregisters: gone from both readers' answers
    assert r1.call(R.UNREGISTER_CLIENT, {"clientID": "10.0.0.2@cpp", "consumerGroup": "g"}).code == RC.SUCCESS
    for w in (r0, r1):
        assert json.loads(w.call(R.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "g"}).body)["connectionSet"] == [java]
    # a member on reader 1 again; reader 0's client closes its connection: its consumer and producer are gone
    _heartbeat(r1, "10.0.0.2@cpp", [{"groupName": "g", "subscriptionDataSet": [tags]}], [], language="CPP", version=5)
    r0.close()
    assert _wait_for(lambda: json.loads(r1.call(R.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "g"}).body)
                     ["connectionSet"] == [cpp])
    # (producers reach the other readers with the roster, published soon after: not in the same step)
    assert _wait_for(lambda: r1.call(R.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "pg"}).code == RC.SYSTEM_ERROR)
    # reader 1 is killed: whatever it published is no longer anyone's answer
    r0 = Wire("127.0.0.1", app.cfg.reader_port(0))
    os.kill(app.role_pid("reader-1"), signal.SIGKILL)
    assert _wait_for(lambda: r0.call(R.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "g"}).code
                     == RC.CONSUMER_NOT_ONLINE)
    assert json.loads(r0.call(R.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": TOPIC}).body) == {"groupList": ["g2"]}


def test_the_admin_client_and_cli_list_a_groups_real_members(appliance_factory):
    app = appliance_factory(namesrv=True).start()
    create_topic(app, TOPIC, 2)

    async def run():
        consumers = [PushConsumer(GROUP, app.namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET") for _ in range(2)]
        for c in consumers:
            await c.subscribe(TOPIC, "TagA").register(lambda _msgs: True).start()
        try:
            async with Producer("stats_producer", app.namesrv) as p:
                await p.send(Message(TOPIC, b"x", tags="TagA"))
                async with Admin(app.namesrv) as admin:
                    cc = await admin.consumer_connection(GROUP)
                    producers = await admin.producer_connection("stats_producer", TOPIC)
                    groups = await admin.consumed_by(TOPIC)
                out = await asyncio.to_thread(app.cmd, "connections", "-g", GROUP)
                status = await asyncio.to_thread(app.cmd, "topic-status", "-t", TOPIC)
            return [c.instance.client_id for c in consumers], p.instance.client_id, cc, producers, groups, out, status
        finally:
            for c in consumers:
                await c.shutdown()

    ids, producer_id, cc, producers, groups, out, status = asyncio.run(run())
    assert [c.client_id for c in cc.connections] == sorted(ids)
    assert {(c.language, c.client_addr.split(":")[0]) for c in cc.connections} == {("PYTHON", "127.0.0.1")}
    assert (cc.consume_type, cc.message_model, cc.consume_from) == ("CONSUME_PASSIVELY", "CLUSTERING",
                                                                     "CONSUME_FROM_FIRST_OFFSET")
    assert cc.subscriptions == {TOPIC: "TagA", f"%RETRY%{GROUP}": "*"}      # the retry topic, as a Java member's
    assert [c.client_id for c in producers] == [producer_id]
    assert groups == [GROUP]
    assert out.returncode == 0, out.stderr
    for client_id in ids:
        assert re.search(rf"^\d+\s+{re.escape(client_id)}\s+127\.0\.0\.1:\d+\s+PYTHON\s", out.stdout, re.M), out.stdout
    assert re.search(rf"Topic: {TOPIC}\s+SubExpression: TagA$", out.stdout, re.M)
    assert "MessageModel: CLUSTERING" in out.stdout
    assert status.returncode == 0 and f"Consumed by: {GROUP}" in status.stdout
    out = app.cmd("connections", "-g", "nobody")
    assert out.returncode == 1 and "TOPIC_NOT_EXIST" in out.stderr
    out = app.cmd("cluster")                                  # mqadmin clusterList's view: the one message in
    assert out.returncode == 0, out.stderr
    (row,) = [line.split() for line in out.stdout.splitlines()[1:]]
    assert row[:5] == [app.cfg.brokerClusterName, "b1", "0", app.addr, "V4_9_8"] and row[7] == "1", out.stdout


def test_runtime_info_has_what_mqadmin_cluster_list_reads(appliance_factory):
    """GET_BROKER_RUNTIME_INFO counts messages in and out since the appliance started (the same
    on every reader), their rates over 10/60/600 s, and the store's earliest message and disk use."""
    app = appliance_factory().start()
    create_topic(app, TOPIC, 2)
    w = Wire("127.0.0.1", app.cfg.listenPort)
    for i in range(12):
        resp = w.call(R.SEND_MESSAGE_V2, {"a": "pg", "b": TOPIC, "c": "TBW102", "d": "4", "e": str(i % 2),
                                          "f": "0", "g": str(int(time.time() * 1000)), "h": "0", "j": "0"},
                      body=b"m%d" % i)
        assert resp.code == RC.SUCCESS, resp.remark
    asyncio.run(dispatched(app))
    pulled = 0
    for qid in (0, 1):                               # 5 of queue 0 and all 6 of queue 1
        resp = w.call(R.PULL_MESSAGE, {"consumerGroup": "g", "topic": TOPIC, "queueId": str(qid), "queueOffset": "0",
                                       "maxMsgNums": "5" if qid == 0 else "32", "sysFlag": "0", "commitOffset": "0",
                                       "suspendTimeoutMillis": "0", "subVersion": "0"})
        pulled += len(message.decode_records(resp.body))
    assert pulled == 11
    resp = w.call(R.PULL_MESSAGE, {"consumerGroup": "g", "topic": TOPIC, "queueId": "1", "queueOffset": "6",
                                   "maxMsgNums": "32", "sysFlag": "0", "commitOffset": "0",
                                   "suspendTimeoutMillis": "0", "subVersion": "0"})
    assert resp.code == RC.PULL_NOT_FOUND                # a pull that found nothing: a miss
    time.sleep(2.5)                                  # each reader samples the counts on its 1 s tick
    infos = [json.loads(Wire("127.0.0.1", app.cfg.reader_port(i)).call(R.GET_BROKER_RUNTIME_INFO).body)["table"]
             for i in (0, 1)]
    for info in infos:
        assert (info["msgPutTotalTodayNow"], info["msgGetTotalTodayNow"]) == ("12", "11")
        assert [info[k] for k in ("msgPutTotalYesterdayMorning", "msgPutTotalTodayMorning",
                                  "msgGetTotalYesterdayMorning", "msgGetTotalTodayMorning")] == ["0"] * 4
        assert info["earliestMessageTimeStamp"] == str(store_time(w, TOPIC, 0, 0))
        assert 0 < float(info["commitLogDiskRatio"]) < 1
        # three rates, as Java's tools split and parse them; all 12 (11) came within the last 10 s
        put_tps, get_tps = ([float(x) for x in info[k].split(" ")] for k in ("putTps", "getTransferedTps"))
        assert len(put_tps) == len(get_tps) == 3 and 0 < put_tps[0] <= 12 and 0 < get_tps[0] <= 11
        assert info["getTransferredTps"] == info["getTransferedTps"]
        # pulls, as StoreStatsService counts getMessage calls: 2 found messages, 1 found none
        found, miss, total = ([float(x) for x in info[k].split(" ")] for k in ("getFoundTps", "getMissTps",
                                                                                 "getTotalTps"))
        assert 0 < found[0] <= 2 and 0 < miss[0] <= 1 and abs(found[0] - 2 * miss[0]) <= 0.011, info
        assert all(abs(t - (f + m)) <= 0.011 for t, f, m in zip(total, found, miss)), info
        assert int(info["bootTimestamp"]) <= int(time.time() * 1000) and info["runtime"].startswith("[ 0 days")
    assert infos[0]["msgPutTotalTodayNow"] == infos[1]["msgPutTotalTodayNow"]
    # what rocketmq-exporter parses strictly: every key, in its form; the puts' figures from the histograms
    sizes = [h.total_size for q in (0, 1) for h, *_rest in message.record_fields(w.call(R.PULL_MESSAGE, {
        "consumerGroup": "probe", "topic": TOPIC, "queueId": str(q), "queueOffset": "0", "maxMsgNums": "32",
        "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "0"}).body)]
    for info in infos:
        got = exporter.parse(info)
        assert (got["putMessageTimesTotal"], got["putMessageSizeTotal"]) == (12, sum(sizes))
        assert got["putMessageAverageSize"] == sum(sizes) / 12
        assert sum(got["putMessageDistributeTime"].values()) == 12 and len(got["putMessageDistributeTime"]) == 13
        assert 0 <= got["putLatency99"] <= got["putMessageEntireTimeMax"] + 1000
        assert got["getMessageEntireTimeMax"] >= 0 and got["commitLogDirCapacity"][0] > got["commitLogDirCapacity"][1] > 0
    # VIEW_BROKER_STATS_DATA: BrokerStatsManager's counts over a minute, an hour, a day
    gets = int(json.loads(w.call(R.GET_BROKER_RUNTIME_INFO).body)["table"]["msgGetTotalTodayNow"])   # (the probes' too)
    for name, key, total in (("BROKER_PUT_NUMS", app.cfg.brokerClusterName, 12), ("TOPIC_PUT_NUMS", TOPIC, 12),
                             ("TOPIC_PUT_SIZE", TOPIC, sum(sizes)), ("BROKER_GET_NUMS", app.cfg.brokerClusterName, gets)):
        resp = w.call(R.VIEW_BROKER_STATS_DATA, {"statsName": name, "statsKey": key})
        body = json.loads(resp.body)
        assert sorted(body) == ["statsDay", "statsHour", "statsMinute"], (name, body)
        assert all(v["sum"] == total and v["tps"] > 0 and v["avgpt"] == 0.0 for v in body.values()), (name, body)
    for name, key in (("GROUP_GET_NUMS", f"{TOPIC}@g"), ("TOPIC_PUT_NUMS", "NoSuchTopic"), ("SNDBCK_PUT_NUMS", "x@y")):
        resp = w.call(R.VIEW_BROKER_STATS_DATA, {"statsName": name, "statsKey": key})   # g never committed
        assert (resp.code, resp.remark) == (RC.SYSTEM_ERROR, f"The stats <{name}> <{key}> not exist")


def _asked(w: Wire, code: int = R.GET_CONSUMER_RUNNING_INFO) -> Command:
    """The next request ``code`` the broker puts to the client on ``w`` (its
    NOTIFY_CONSUMER_IDS_CHANGED pushes skipped)."""
    while (req := w.read_request()).code != code:
        pass
    return req


def test_a_consumer_is_asked_for_its_running_info_by_whichever_reader_is_asked(appliance_factory):
    """GET_CONSUMER_RUNNING_INFO goes to the consumer itself over its own connection, as Java's
    callConsumer: put by the reader holding that connection, or forwarded there by the other, and
    its answer relayed as it came; a consumer not online, too old, silent or gone gets Java's codes."""
    app = appliance_factory().start()
    r0, r1, client, old = (Wire("127.0.0.1", app.cfg.reader_port(i)) for i in (0, 1, 1, 0))
    group = [{"groupName": "g", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
              "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "subscriptionDataSet": []}]
    _heartbeat(client, "10.0.0.9@c", group, [], language="JAVA", version=399)
    _heartbeat(old, "10.0.0.8@old", group, [], language="JAVA", version=61)     # V3_1_7
    ext = {"consumerGroup": "g", "clientId": "10.0.0.9@c", "jstackEnable": "true"}
    assert _wait_for(lambda: r0.call(R.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "g"}).code == RC.SUCCESS)
    for w in (r0, r1, r0):                   # forwarded by reader 0; asked by reader 1 itself
        opaque = w.send(R.GET_CONSUMER_RUNNING_INFO, ext)
        req = _asked(client)
        assert req.ext == ext and not req.is_oneway and not req.is_response and req.language == "JAVA"
        client.answer(req, RC.SUCCESS, None, {"k": "v"}, b"info-%d" % opaque)
        resp = w.read_response()
        assert (resp.code, resp.opaque, resp.body, resp.ext.get("k")) == (RC.SUCCESS, opaque, b"info-%d" % opaque, "v")
    opaque = r0.send(R.GET_CONSUMER_RUNNING_INFO, ext)        # the consumer's refusal comes back as it gave it
    client.answer(_asked(client), RC.SYSTEM_ERROR, "The Consumer Group <g> not exist in this consumer")
    resp = r0.read_response()
    assert (resp.code, resp.remark, resp.opaque) == \
        (RC.SYSTEM_ERROR, "The Consumer Group <g> not exist in this consumer", opaque)
    for w in (r0, r1):
        resp = w.call(R.GET_CONSUMER_RUNNING_INFO, {**ext, "clientId": "nobody"})
        assert (resp.code, resp.remark) == (RC.SYSTEM_ERROR, "The Consumer <g> <nobody> not online")
        resp = w.call(R.GET_CONSUMER_RUNNING_INFO, {**ext, "clientId": "10.0.0.8@old"})
        assert (resp.code, resp.remark) == (RC.SYSTEM_ERROR, "The Consumer <10.0.0.8@old> Version <61> too low to "
                                                             "finish, please upgrade it to V3_1_8_SNAPSHOT")
    resp = r0.call(R.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "g"})
    assert resp.code == RC.SYSTEM_ERROR and "clientId" in resp.remark
    # a consumer that never answers: CONSUME_MSG_TIMEOUT after the broker's 10 s (relayed by reader 0)
    r0.sock.settimeout(30)
    began = time.monotonic()
    r0.send(R.GET_CONSUMER_RUNNING_INFO, ext)
    _asked(client)
    resp = r0.read_response()
    assert resp.code == RC.CONSUME_MSG_TIMEOUT and resp.remark.startswith("consumer <g> <10.0.0.9@c> Timeout: ")
    assert 9.5 < time.monotonic() - began < 20
    # one that goes away while asked: SYSTEM_ERROR at once, and it is not online after
    r1.send(R.GET_CONSUMER_RUNNING_INFO, ext)
    _asked(client)
    client.close()
    resp = r1.read_response()
    assert resp.code == RC.SYSTEM_ERROR and resp.remark.startswith("invoke consumer <g> <10.0.0.9@c> Exception")
    assert _wait_for(lambda: r0.call(R.GET_CONSUMER_RUNNING_INFO, ext).remark == "The Consumer <g> <10.0.0.9@c> not online")


def test_real_consumers_report_their_running_info_and_the_cli_checks_them(appliance_factory):
    """Two push consumers of our client answer GET_CONSUMER_RUNNING_INFO through the appliance:
    their properties, subscription, the queues each owns with its offsets, and their rates; and
    ``appliance consumer-status`` prints them and finds the group sound."""
    app = appliance_factory(namesrv=True).start()
    create_topic(app, TOPIC, 4)

    async def run():
        got: list = []
        consumers = [PushConsumer(GROUP, app.namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET") for _ in range(2)]
        for c in consumers:
            await c.subscribe(TOPIC, "TagA").register(lambda msgs: got.extend(msgs) or True).start()
        try:
            deadline = time.monotonic() + 30
            while sorted(len(owned(c)) for c in consumers) != [2, 2]:       # each owns two queues
                assert time.monotonic() < deadline, [owned(c) for c in consumers]
                await asyncio.sleep(0.1)
            async with Producer("running_producer", app.namesrv) as p:
                for i in range(20):
                    await p.send(Message(TOPIC, b"m%d" % i, tags="TagA"), queue=MessageQueue(TOPIC, "b1", i % 4))
            while len(got) < 20:
                assert time.monotonic() < deadline + 30
                await asyncio.sleep(0.05)
            mine = {c.instance.client_id: set(owned(c)) for c in consumers}
            async with Admin(app.namesrv) as admin:
                infos = {c.instance.client_id: await admin.consumer_running_info(GROUP, c.instance.client_id, i == 0)
                         for i, c in enumerate(consumers)}
                try:
                    await admin.consumer_running_info(GROUP, "10.9.9.9@nobody")
                    missing = None
                except MQBrokerError as e:
                    missing = e
            out = await asyncio.to_thread(app.cmd, "consumer-status", "-g", GROUP)
            return mine, [c.started_ms for c in consumers], infos, missing, out
        finally:
            for c in consumers:
                await c.shutdown()

    mine, started, infos, missing, out = asyncio.run(run())
    assert missing is not None and (missing.code, missing.remark) == \
        (RC.SYSTEM_ERROR, f"The Consumer <{GROUP}> <10.9.9.9@nobody> not online")
    assert set().union(*mine.values()) == {MessageQueue(TOPIC, "b1", q) for q in range(4)}
    for (client_id, info), start_ms in zip(infos.items(), started):
        assert {q for q in info.queues if not q.topic.startswith("%RETRY%")} == mine[client_id]
        for mq, pq in info.queues.items():        # 5 messages each, all consumed; none retried
            if mq.topic.startswith("%RETRY%"):
                assert (pq["commitOffset"], pq["cachedMsgCount"]) == (0, 0)
                continue
            assert (pq["commitOffset"], pq["cachedMsgCount"], pq["locked"]) == (5, 0, False)
            assert pq["lastConsumeTimestamp"] >= start_ms and pq["lastPullTimestamp"] >= start_ms
        p = info.properties
        assert (p["consumerGroup"], p["messageModel"], p["PROP_CONSUME_TYPE"], p["PROP_CONSUMEORDERLY"]) == \
            (GROUP, "CLUSTERING", "CONSUME_PASSIVELY", "false")
        assert (p["PROP_CLIENT_VERSION"], p["PROP_NAMESERVER_ADDR"], p["PROP_CONSUMER_START_TIMESTAMP"]) == \
            ("V4_9_8", app.namesrv + ";", str(start_ms))
        assert [(s["topic"], s["subString"], s["tagsSet"]) for s in info.subscriptions] == [
            (f"%RETRY%{GROUP}", "*", []), (TOPIC, "TagA", ["TagA"])]
        st = info.status[TOPIC]
        assert st["pullTPS"] > 0 and st["consumeOKTPS"] > 0 and st["consumeFailedMsgs"] == 0
        assert info.problems(client_id) == []
    first, second = infos.values()
    assert "_pull_loop" in first.jstack and second.jstack is None
    assert out.returncode == 0, out.stderr
    for client_id in infos:
        assert f"#Consumer {client_id}" in out.stdout
    assert re.search(rf"^002 Topic: {TOPIC}\s+ClassFilter: false\s+SubExpression: TagA$", out.stdout, re.M)   # after the retry topic
    assert re.search(rf"^{TOPIC}\s+b1\s+0\s+5$", out.stdout, re.M), out.stdout      # queue 0's offset
    assert out.stdout.rstrip().endswith("Same subscription in the same group of consumer\nRebalance OK")
    out = app.cmd("consumer-status", "-g", GROUP, "-i", "10.9.9.9@nobody")
    assert out.returncode == 1 and "not online" in out.stderr


def test_a_stored_message_is_given_to_one_consumer_to_consume_directly(appliance_factory):
    """CONSUME_MESSAGE_DIRECTLY (309): the broker puts the stored record the msgId names, with its
    own name, to the consumer (whichever reader is asked), and relays the consumer's result; our
    push consumer hands it to its listener and says how that went."""
    app = appliance_factory(namesrv=True).start()
    create_topic(app, TOPIC, 2)
    r0, client = Wire("127.0.0.1", app.cfg.reader_port(0)), Wire("127.0.0.1", app.cfg.reader_port(1))
    _heartbeat(client, "10.0.0.9@c", [{"groupName": "g", "subscriptionDataSet": []}], [], language="JAVA", version=399)
    seen, verdicts = [], iter([True, False, RuntimeError("boom"), True])

    def listener(msgs):
        seen.extend(msgs)
        verdict = next(verdicts)
        if isinstance(verdict, Exception):
            raise verdict
        return verdict

    async def run():
        async with Producer("direct_producer", app.namesrv) as p:
            sent = await p.send(Message(TOPIC, b"direct", tags="TagD", keys="k1"))
        await dispatched(app)
        ext = {"consumerGroup": "g", "clientId": "10.0.0.9@c", "msgId": sent.offset_msg_id}
        opaque = await asyncio.to_thread(r0.send, R.CONSUME_MESSAGE_DIRECTLY, ext)
        req = await asyncio.to_thread(_asked, client, R.CONSUME_MESSAGE_DIRECTLY)
        _ip, _port, phys = message.parse_offset_msg_id(sent.offset_msg_id)
        stored = r0.call(R.VIEW_MESSAGE_BY_ID, {"offset": str(phys)}).body     # (r0 waits: a reply is queued)
        client.answer(req, RC.SUCCESS, body=b'{"consumeResult":"CR_SUCCESS"}')
        relayed = await asyncio.to_thread(r0.read_response)
        bad = r0.call(R.CONSUME_MESSAGE_DIRECTLY, {**ext, "msgId": "ZZ"})
        c = PushConsumer("direct_group", app.namesrv)
        await c.subscribe(TOPIC, "TagX").register(listener).start()
        try:
            async with Admin(app.namesrv) as admin:
                results = [await admin.consume_message_directly("direct_group", c.instance.client_id,
                                                                sent.offset_msg_id) for _ in range(3)]
            out = await asyncio.to_thread(app.cmd, "resend", "-m", sent.offset_msg_id, "-g", "direct_group",
                                          "-i", c.instance.client_id)
        finally:
            await c.shutdown()
        return sent, opaque, req, stored, relayed, bad, results, out

    sent, opaque, req, stored, relayed, bad, results, out = asyncio.run(run())
    assert req.body == stored and len(stored) > 0
    assert req.ext == {"consumerGroup": "g", "clientId": "10.0.0.9@c", "msgId": sent.offset_msg_id, "brokerName": "b1"}
    assert (relayed.code, relayed.opaque, relayed.body) == (RC.SUCCESS, opaque, b'{"consumeResult":"CR_SUCCESS"}')
    assert bad.code == RC.SYSTEM_ERROR and bad.remark.startswith("msgId 'ZZ': ")
    # the real consumer: its listener had the message (whatever its subscription), three times
    assert [(m.body, m.tags, m.keys, m.msg_id, m.broker_name) for m in seen] == \
        [(b"direct", "TagD", ["k1"], sent.msg_id, "b1")] * 4
    assert [r["consumeResult"] for r in results] == ["CR_SUCCESS", "CR_LATER", "CR_THROW_EXCEPTION"]
    assert results[2]["remark"] == "RuntimeError: boom" and "remark" not in results[0]
    assert all(r["autoCommit"] is True and r["order"] is False and r["spentTimeMills"] >= 0 for r in results)
    assert out.returncode == 0 and re.fullmatch(r"CR_SUCCESS in \d+ ms\n", out.stdout), (out.stdout, out.stderr)
