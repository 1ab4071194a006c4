"""Real clients' own bytes against a whole appliance: every request frame in ``captures/`` (the Java
4.9.8 client in both serializations, the C++ client of ``rocketmq`` 0.4.4 and of
``rocketmq-client-python`` 2.0.0, the Node ``ali-ons``), replayed byte for byte as one conversation,
gets the answer an Apache RocketMQ broker and name server give.  The Java client has no other
live test here: its jars come from Maven, which this box cannot reach."""
from __future__ import annotations

import asyncio
import json
import os
import time

from remoting import codec
from remoting.codes import RequestCode as R, ResponseCode as RC
from store import message
from store.configfile import loads_tolerant
from tests.integration.harness import read_topic, wait_route
from tests.integration.test_readers import send_v2
from tests.integration.wire import Wire

CAPTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "captures")


def frame(name: str) -> bytes:
    with open(os.path.join(CAPTURES, name + ".bin"), "rb") as f:
        return f.read()


def test_every_captured_client_request_gets_rocketmqs_answer(appliance_factory):
    app = appliance_factory(namesrv=True).start()
    broker = Wire("127.0.0.1", app.cfg.listenPort, timeout=30)

    # push consumers join: their groups and retry topics are made, the members listed
    for name in ("java-4.9.8__34_HEART_BEAT_pushconsumer", "cpp-rocketmq044__34_HEART_BEAT_pushconsumer",
                 "node-alions__34_HEART_BEAT_pushconsumer"):
        assert broker.call_raw(frame(name)).code == RC.SUCCESS, name
    r = broker.call(R.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "CID_JAVA"})
    assert json.loads(r.body)["consumerIdList"] == ["192.0.2.2@3359#1368953288085"]

    # a lite pull consumer's long poll on an empty queue of a topic nobody has made yet is refused;
    # once Java's send has made TopicTest (4 queues, from TBW102) it is held until Node's send lands
    r = broker.call_raw(frame("java-4.9.8__11_PULL_MESSAGE_litepull"))
    assert (r.code, r.remark) == (RC.TOPIC_NOT_EXIST, "topic[TopicTest] not exist, apply first please! "
                                                      "\nSee http://rocketmq.apache.org/docs/faq/ for further details.")

    sends = {}
    vip = Wire("127.0.0.1", app.cfg.listenPort - 2)      # where the Java producer sends (its "VIP channel")
    for name in ("java-4.9.8__310_SEND_MESSAGE_V2", "cpp-rocketmq044__10_SEND_MESSAGE",
                 "cpp-rocketmq044__10_SEND_MESSAGE_batch1", "cpp-rocketmq044__10_SEND_MESSAGE_oneway",
                 "cpp-client-python200__310_SEND_MESSAGE_V2"):
        r = (vip if name.startswith("java") else broker).call_raw(frame(name))
        assert r.code == RC.SUCCESS, (name, r.code, r.remark)
        sends[name] = (int(r.ext["queueId"]), int(r.ext["queueOffset"]), r.ext["msgId"].split(","))
    assert [v[:2] for v in sends.values()] == [(2, 0), (0, 0), (0, 1), (1, 0), (0, 3)]

    held = Wire("127.0.0.1", app.cfg.listenPort, timeout=30)
    held.sock.sendall(frame("java-4.9.8__11_PULL_MESSAGE_litepull"))           # TopicTest queue 3, 20 s
    time.sleep(0.5)
    r = broker.call_raw(frame("node-alions__310_SEND_MESSAGE_V2"))
    assert (r.code, r.ext["queueId"], r.ext["queueOffset"]) == (RC.SUCCESS, "3", "0")
    t0 = time.monotonic()
    r = held.read_response()
    assert time.monotonic() - t0 < 5 and (r.code, r.remark, r.opaque) == (RC.SUCCESS, "FOUND", 39)
    assert [x.body for x in message.decode_records(r.body)] == [b"hello from ali-ons"]

    # every message is stored once, with the properties its client gave it
    stored = {(m.queue_id, m.queue_offset): m for m in asyncio.run(read_topic(app, "TopicTest"))}
    assert {k: m.body for k, m in stored.items()} == {
        (2, 0): b"hello from java 4.9.8", (0, 0): b"hello from rocketmq 0.4.4", (0, 1): b"batch-0",
        (0, 2): b"batch-1", (1, 0): b"batch-0", (0, 3): b"hello from rocketmq-client-python 2.0.0",
        (3, 0): b"hello from ali-ons"}
    java = stored[2, 0]
    assert (java.tags, java.keys, java.properties["myprop"], java.msg_id) == (
        "TagA", ["key1"], "v1", "FD0000000000000000000000000000020C7E30946E096AB4353D0000")
    assert [stored[0, i].msg_id for i in (1, 2)] == ["0100007F0000D1DB000093981F700100",
                                                     "0100007F0000D1DB000093981F700200"]
    for name, (qid, offset, msg_ids) in sends.items():      # a reply names its records by offset msgId
        assert [stored[qid, offset + i].offset_msg_id for i in range(len(msg_ids))] == msg_ids, name
    assert [stored[0, i].keys for i in (1, 2)] == [["k0"], ["k1"]] and stored[0, 2].tags == "TagB"
    assert (stored[3, 0].tags, stored[3, 0].keys) == ("TagA", ["key1"])

    # every client's route query, JSON or ROCKETMQ-serialized, finds HAProxy's address
    wait_route(app, "TopicTest")
    host, _, port = app.namesrv.partition(":")
    ns = Wire(host, int(port))
    for name in ("java-4.9.8__105_GET_ROUTEINFO_BY_TOPIC", "java-4.9.8-ROCKETMQser__105_GET_ROUTEINFO_BY_TOPIC",
                 "cpp-rocketmq044__105_GET_ROUTEINFO_BY_TOPIC", "node-alions__105_GET_ROUTEINFO_BY_TOPIC",
                 "cpp-client-python200__105_GET_ROUTEINFO_BY_TOPIC"):
        r = ns.call_raw(frame(name))
        assert r.code == RC.SUCCESS, (name, r.code, r.remark)
        route = loads_tolerant(r.body.decode())
        assert [b["brokerAddrs"] for b in route["brokerDatas"]] == [{"0": app.addr}], name
        # brokerId keys as fastjson writes them for clients before 4.9.4, quoted for the others
        assert (b'{"0":"' if name.startswith("java") else b'{0:"') + app.addr.encode() in r.body, name
        asked = next(iter(codec.Decoder().feed(frame(name)))).ext["topic"]       # TBW102 has 8 queues
        assert route["queueDatas"][0]["readQueueNums"] == {"TopicTest": 4, "TBW102": 8}[asked], name
        assert r.serialize_type == (codec.ROCKETMQ if "ROCKETMQser" in name else codec.JSON), name
    ns.close()

    # pulls: found from the first offset, an illegal queue of a retry topic (1 queue) refused as
    # RocketMQ refuses it, an empty retry queue held until it grows
    for name in ("cpp-rocketmq044__11_PULL_MESSAGE_pullconsumer", "node-alions__11_PULL_MESSAGE"):
        r = broker.call_raw(frame(name))
        assert (r.code, r.ext["nextBeginOffset"], r.ext["maxOffset"]) == (RC.SUCCESS, "4", "4"), name
        assert [x.body for x in message.decode_records(r.body)][0] == b"hello from rocketmq 0.4.4"
    r = broker.call_raw(frame("java-4.9.8__11_PULL_MESSAGE_push"))
    assert r.code == RC.SYSTEM_ERROR and r.remark.startswith(
        "queueId[1] is illegal, topic:[%RETRY%CID_JAVA] topicConfig.readQueueNums:[1]")
    held.sock.sendall(frame("cpp-rocketmq044__11_PULL_MESSAGE_push"))         # %RETRY%CID_TEST queue 0, 15 s
    time.sleep(0.5)
    assert send_v2(broker, "%RETRY%CID_TEST", b"again").code == RC.SUCCESS
    r = held.read_response()
    assert (r.code, r.opaque) == (RC.SUCCESS, 9) and [x.body for x in message.decode_records(r.body)] == [b"again"]

    # offsets: Java commits oneway (flag 2, so unanswered); C++ reads its group's offset
    broker.sock.sendall(frame("java-4.9.8__15_UPDATE_CONSUMER_OFFSET"))
    assert broker.call(R.QUERY_CONSUMER_OFFSET, {"consumerGroup": "CID_JAVA", "topic": "%RETRY%CID_JAVA",
                                                  "queueId": "1"}).ext["offset"] == "0"
    r = broker.call_raw(frame("cpp-rocketmq044__14_QUERY_CONSUMER_OFFSET"))
    assert (r.code, r.ext["offset"]) == (RC.SUCCESS, "0")
    assert broker.call_raw(frame("cpp-rocketmq044__35_UNREGISTER_CLIENT")).code == RC.SUCCESS
    # each group's joining was told to its connection (NOTIFY_CONSUMER_IDS_CHANGED, oneway)
    assert [(c.code, c.flag, c.ext["consumerGroup"]) for c in broker.pushed] == [
        (R.NOTIFY_CONSUMER_IDS_CHANGED, codec.RPC_ONEWAY, g) for g in ("CID_JAVA", "CID_TEST", "CID_NODE")]
    assert not held.pushed
    for w in (broker, held, vip):
        w.close()
    assert app.stop() == 0                   # the writer keeps the offset Java committed (and nobody else)
    with open(os.path.join(app.cfg.config_dir, "consumerOffset.json")) as f:
        assert loads_tolerant(f.read())["offsetTable"] == {"%RETRY%CID_JAVA@CID_JAVA": {"1": 0}}
