"""Real clients' own bytes against a whole appliance: every request frame in ``captures/`` (the Java
4.9.8 client in both serializations, the C++ client of ``rocketmq`` 0.4.4 and of
``rocketmq-client-python`` 2.0.0, the Node ``ali-ons``), replayed byte for byte as one conversation,
gets the answer an Apache RocketMQ broker and name server give.  The Java client has no other
live test here: its jars come from Maven, which this box cannot reach."""
from __future__ import annotations

import asyncio
import collections
import glob
import json
import os
import random
import time

import pytest

from rocketbox.remoting import codec
from rocketbox.remoting.codec import Command
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.store import message
from rocketbox.store.configfile import loads_tolerant
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


NAMESRV_CODES = {R.PUT_KV_CONFIG, R.GET_KV_CONFIG, R.DELETE_KV_CONFIG, R.REGISTER_BROKER, R.UNREGISTER_BROKER,
                 R.GET_ROUTEINFO_BY_TOPIC, R.GET_BROKER_CLUSTER_INFO, R.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
                 R.GET_KVLIST_BY_NAMESPACE}
ODD_VALUES = ("", "-1", "0", "1", "-2147483649", "2147483648", "99999999999999999999", "abc", "x" * 5000, "é☃",
              "true", "null", " 1", "1.5", "%RETRY%", "TBW102", "SCHEDULE_TOPIC_XXXX", "\x01\x02")


def test_mutated_captured_requests_each_get_an_answer_and_log_no_error(appliance_factory):
    """The captured requests with fields dropped or set to odd values (empty, negative, past 64
    bits, not numbers, 5,000 bytes, non-ASCII, system topics) and bytes of their bodies flipped,
    pipelined 800 on a connection: each gets an answer (a long-polled pull may be held), the
    connections stay open, no handler fails (nothing logged at ERROR), and the broker serves on."""
    rnd = random.Random(20261123)
    app = appliance_factory(namesrv=True).start()
    captured = [next(iter(codec.Decoder().feed(frame(os.path.basename(f)[:-4]))))
                for f in sorted(glob.glob(os.path.join(CAPTURES, "*__*.bin"))) if "h2c" not in f]
    host, _, port = app.namesrv.partition(":")
    wires = {True: Wire(host, int(port), timeout=15), False: Wire("127.0.0.1", app.cfg.listenPort, timeout=15)}
    waiting = {True: {}, False: {}}               # opaque -> request code, per connection
    for opaque in range(1, 801):
        cmd = rnd.choice(captured)
        ext, body = dict(cmd.ext), bytearray(cmd.body)
        for _ in range(rnd.randint(1, 3)):
            if ext and rnd.random() < 0.2:
                ext.pop(rnd.choice(list(ext)))
            elif ext:
                ext[rnd.choice(list(ext))] = rnd.choice(ODD_VALUES)
        for _ in range(rnd.randint(0, 4) if body and rnd.random() < 0.3 else 0):
            body[rnd.randrange(len(body))] = rnd.randrange(256)
        serialization = cmd.serialize_type if rnd.random() < 0.5 else codec.ROCKETMQ
        to_ns = cmd.code in NAMESRV_CODES
        wires[to_ns].sock.sendall(codec.encode(Command(cmd.code, ext, bytes(body), opaque=opaque, flag=cmd.flag,
                                                       language=cmd.language, version=cmd.version,
                                                       serialize_type=serialization)))
        if not cmd.flag & codec.RPC_ONEWAY:
            waiting[to_ns][opaque] = cmd.code
    answered = collections.Counter()
    for to_ns, w in wires.items():
        try:
            while any(code != R.PULL_MESSAGE for code in waiting[to_ns].values()):
                r = w.read_response()
                answered[r.code] += 1
                assert waiting[to_ns].pop(r.opaque, None) is not None, f"an answer to opaque {r.opaque} twice"
        except TimeoutError:
            pytest.fail(f"unanswered after 15 s: {sorted(waiting[to_ns].items())[:20]}")
    assert answered[RC.SUCCESS] > 100 and answered[RC.SYSTEM_ERROR] > 100, answered      # both kinds were sent
    errors = [line for line in app.log_text().splitlines() if " ERROR " in line or "Traceback" in line]
    assert not errors, errors[:10]
    assert send_v2(wires[False], "StillHere", b"ok").code == RC.SUCCESS
    for w in wires.values():
        w.close()
