"""Readers behind HAProxy, spoken to frame by frame: sends in every dialect, pulls with long polling
and tag filters, offsets and group membership shared across readers, bad input."""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

from rocketbox.remoting import codec
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.shm.layout import C
from rocketbox.store import message, topicjournal
from rocketbox.store.configfile import loads_tolerant
from tests.integration.harness import ROOT, create_topic, dispatched
from tests.integration.wire import Wire


def send_ext(topic: str, props: str = "", queue: int = 0, **kw) -> dict:
    return {"a": "pg", "b": topic, "c": "TBW102", "d": "4", "e": str(queue), "f": "0",
            "g": str(int(time.time() * 1000)), "h": "0", "i": props, "j": "0", "k": "false", **kw}


def send_v2(w: Wire, topic: str, body: bytes, props: str = "", queue: int = 0, **kw):
    return w.call(R.SEND_MESSAGE_V2, send_ext(topic, props, queue, **kw), body)


def pull(w: Wire, topic: str, offset: int, queue: int = 0, flag: int = 0, suspend_ms: int = 0, sub: str = "*",
         group: str = "g1", nums: int = 32):
    return w.call(R.PULL_MESSAGE, {"consumerGroup": group, "topic": topic, "queueId": str(queue),
                                   "queueOffset": str(offset), "maxMsgNums": str(nums), "sysFlag": str(flag),
                                   "commitOffset": "0", "suspendTimeoutMillis": str(suspend_ms),
                                   "subscription": sub, "subVersion": "0"})


def bodies(resp) -> list[bytes]:
    return [r.body for r in message.decode_records(resp.body)]


def pull_n(w: Wire, topic: str, n: int, **kw) -> list[bytes]:
    """Pull from offset 0 until ``n`` messages are there (a reply comes before dispatch), or 5 s."""
    deadline = time.monotonic() + 5
    while True:
        got = bodies(pull(w, topic, 0, **kw))
        if len(got) >= n or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def heartbeat_body(client: str, group: str, topic: str = "T", model: str = "CLUSTERING") -> bytes:
    return json.dumps({"clientID": client, "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "messageModel": model, "consumeType": "CONSUME_PASSIVELY",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": topic, "subString": "*", "tagsSet": [], "codeSet": [], "subVersion": 1,
                                 "classFilterMode": False, "expressionType": "TAG"}]}]}).encode()


def heartbeat(w: Wire, client: str, group: str, topic: str = "T", model: str = "CLUSTERING"):
    return w.call(R.HEART_BEAT, {}, heartbeat_body(client, group, topic, model))


@contextlib.contextmanager
def frozen(app, role: str):
    """``role``'s process stopped (SIGSTOP) for the block, and running again after it whatever happens."""
    pid = app.role_pid(role)
    os.kill(pid, signal.SIGSTOP)
    try:
        yield pid
    finally:
        os.kill(pid, signal.SIGCONT)


def test_sends_in_every_dialect_and_pulls_back(appliance_factory):
    app = appliance_factory().start()
    w = Wire("127.0.0.1", app.cfg.listenPort)
    r = send_v2(w, "Orders", b"one", "TAGS\x01TagA\x02KEYS\x01k1")          # auto-created from TBW102
    assert r.code == RC.SUCCESS, r.remark
    assert r.ext["queueOffset"] == "0" and r.ext["MSG_REGION"] == "DefaultRegion" and r.ext["TRACE_ON"] == "true"
    ip, port, phys = message.parse_offset_msg_id(r.ext["msgId"])
    assert (ip, port, phys) == (b"\x7f\x00\x00\x01", app.cfg.listenPort, 0)
    # code 10, long names, a batch flagged batch=1 (the C++ client's way)
    batch = message.encode_client_batch([(7, b"two", "UNIQ_KEY\x01U2"), (8, b"three", "UNIQ_KEY\x01U3\x02TAGS\x01TagB")])
    r = w.call(R.SEND_MESSAGE, {"producerGroup": "pg", "topic": "Orders", "defaultTopic": "TBW102",
                                "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "0", "bornTimestamp": "1",
                                "flag": "0", "properties": "WAIT\x01true", "batch": "1"}, batch)
    assert r.code == RC.SUCCESS and r.ext["queueOffset"] == "1" and len(r.ext["msgId"].split(",")) == 2
    w.oneway(R.SEND_MESSAGE_V2, {"a": "pg", "b": "Orders", "c": "TBW102", "d": "4", "e": "0", "f": "0",
                                 "g": "1", "h": "0", "i": "", "j": "0", "k": "false"}, b"four")
    assert pull_n(w, "Orders", 4) == [b"one", b"two", b"three", b"four"]
    p = pull(w, "Orders", 0)
    assert p.ext["nextBeginOffset"] == "4" and p.ext["maxOffset"] == "4" and p.remark == "FOUND"
    recs = message.decode_records(p.body)
    assert [x.flag for x in recs[1:3]] == [7, 8]
    assert recs[2].properties["TAGS"] == "TagB" and recs[2].properties["WAIT"] == "true"
    assert recs[0].properties["CLUSTER"] == "DefaultCluster"
    # tag filter on the broker: only TagA
    assert bodies(pull(w, "Orders", 0, flag=0x4, sub="TagA")) == [b"one"]
    # offsets out of range
    r = pull(w, "Orders", 9)
    assert (r.code, r.ext["nextBeginOffset"], r.remark) == (RC.PULL_OFFSET_MOVED, "4", "OFFSET_OVERFLOW_BADLY")
    r = pull(w, "Orders", 4)
    assert (r.code, r.remark) == (RC.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE")
    assert w.call(R.GET_MAX_OFFSET, {"topic": "Orders", "queueId": "0"}).ext["offset"] == "4"
    w.close()


def test_pipelined_sends_to_a_new_topic_create_it_once_and_are_stored_in_order(appliance_factory):
    """A producer's first sends to a topic that does not exist yet, pipelined: one creation,
    shared by all of them (not one per send), and every send stored once, in order."""
    app = appliance_factory().start()
    w = Wire("127.0.0.1", app.cfg.reader_port(0))
    before = topicjournal.read(app.cfg.config_dir)["dataVersion"]["counter"]      # topics.json and its journal
    for i in range(40):
        w.send(R.SEND_MESSAGE_V2, send_ext("Fresh"), b"m%d" % i)
    replies = sorted((w.read_response() for _ in range(40)), key=lambda r: r.opaque)
    assert [(r.code, r.ext["queueOffset"]) for r in replies] == [(RC.SUCCESS, str(i)) for i in range(40)]
    got = pull_n(w, "Fresh", 32)                       # (a pull takes 32 at most)
    deadline = time.monotonic() + 5
    while len(got) < 40 and time.monotonic() < deadline:
        got += bodies(pull(w, "Fresh", len(got)))
    assert got == [b"m%d" % i for i in range(40)]
    topics = topicjournal.read(app.cfg.config_dir)
    assert topics["dataVersion"]["counter"] == before + 1 and "Fresh" in topics["topicConfigTable"]
    w.close()


def test_bad_sends_get_rocketmq_codes(appliance_factory):
    app = appliance_factory(autoCreateTopicEnable="false").start()
    w = Wire("127.0.0.1", app.cfg.listenPort)
    r = send_v2(w, "Nope", b"x")
    assert r.code == RC.TOPIC_NOT_EXIST and "topic[Nope] not exist" in r.remark
    assert send_v2(w, "SCHEDULE_TOPIC_XXXX", b"x").code == RC.NO_PERMISSION
    assert send_v2(w, "bad topic!", b"x").code == RC.SYSTEM_ERROR
    assert w.call(R.UPDATE_AND_CREATE_TOPIC, {"topic": "Made", "defaultTopic": "TBW102", "readQueueNums": "2",
                                              "writeQueueNums": "2", "perm": "6", "topicFilterType": "SINGLE_TAG",
                                              "order": "false"}).code == RC.SUCCESS
    r = send_v2(w, "Made", b"x", queue=5)
    assert r.code == RC.SYSTEM_ERROR and "queueId[5] is illegal" in r.remark
    r = w.call(R.SEND_BATCH_MESSAGE, {"a": "pg", "b": "Made", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1",
                                      "h": "0", "i": "", "m": "true"}, b"\x00\x00\x00\x50garbage")
    assert r.code == RC.MESSAGE_ILLEGAL and "batch" in r.remark
    r = send_v2(w, "Made", b"x" * (app.cfg.maxMessageSize + 1))
    assert r.code == RC.MESSAGE_ILLEGAL and "maxMessageSize" in r.remark
    r = w.call(R.SEND_MESSAGE_V2, {"b": "Made"}, b"x")                   # required fields missing
    assert r.code == RC.SYSTEM_ERROR and "is null" in r.remark
    assert send_v2(w, "Made", b"fine").code == RC.SUCCESS
    assert pull_n(w, "Made", 1) == [b"fine"]                      # nothing refused was stored
    all_topics = json.loads(w.call(R.GET_ALL_TOPIC_CONFIG).body)["topicConfigTable"]
    assert all_topics["Made"]["readQueueNums"] == 2
    w.close()


def test_a_topic_past_maxTopicQueueNums_is_refused_when_made_and_at_start(appliance_factory):
    """A topic's queues are consume-queue directories the writer makes with it: one asking for
    2**31 - 1 of them kept the writer making directories, and every send timed out."""
    from rocketbox.store import configfile
    app = appliance_factory().start()
    w = Wire("127.0.0.1", app.cfg.listenPort)

    def create(topic: str, read: str, write: str):
        return w.call(R.UPDATE_AND_CREATE_TOPIC, {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": read,
                                                  "writeQueueNums": write, "perm": "6",
                                                  "topicFilterType": "SINGLE_TAG", "order": "false"})

    for read, write, bad in (("2147483647", "1", "readQueueNums 2147483647"), ("8", "1025", "writeQueueNums 1025"),
                             ("-1", "8", "readQueueNums -1")):
        r = create("Huge", read, write)
        assert r.code == RC.SYSTEM_ERROR, (r.code, r.remark)
        assert r.remark == f"{bad} of topic Huge is out of range: a topic has 0 to 1024 queues (maxTopicQueueNums)"
    assert create("Wide", "1024", "1024").code == RC.SUCCESS              # the limit itself is fine
    assert send_v2(w, "Wide", b"last", queue=1023).code == RC.SUCCESS
    assert pull_n(w, "Wide", 1, queue=1023) == [b"last"]
    topics = topicjournal.read(app.cfg.config_dir)
    assert "Huge" not in topics["topicConfigTable"] and "Huge" not in os.listdir(f"{app.cfg.root}/consumequeue")
    wide = f"{app.cfg.root}/consumequeue/Wide"
    assert sorted(os.listdir(wide), key=int) == [str(q) for q in range(1024)]  # every queue's directory, made with the topic
    assert [q for q in os.listdir(wide) if os.listdir(f"{wide}/{q}")] == ["1023"]       # files come with the first message
    w.close()
    assert app.stop() == 0
    topics["topicConfigTable"]["Wide"]["readQueueNums"] = 1025          # an edit past the limit
    configfile.write(f"{app.cfg.config_dir}/topics.json", topics)
    r = app.cmd("start")
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert (f"appliance: {app.cfg.config_dir}/topics.json: readQueueNums 1025 of topic Wide is out of range: a topic "
            f"has 0 to 1024 queues (maxTopicQueueNums); raise it in {app.conf}") in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "started " not in r.stderr
    assert not [n for n in os.listdir("/dev/shm") if app.cfg.shmPrefix[1:] in n]


def test_a_batch_whose_properties_are_not_utf8_is_stored_as_sent_and_read_as_java_reads_it(appliance_factory):
    """RocketMQ's broker copies a batch's properties bytes as they come; so do we, and every
    reader of the record (a consumer, VIEW_MESSAGE_BY_ID, the checker) reads them with U+FFFD."""
    from rocketbox.appliance.check import check
    from rocketbox.client.message import decode_messages
    app = appliance_factory().start()
    w = Wire("127.0.0.1", app.cfg.listenPort)
    batch = bytearray(message.encode_client_batch([(0, b"one", "TAGS\x01TagA\x02KEYS\x01kx"), (0, b"two", "")]))
    batch[batch.index(b"kx") + 1] = 0xF9                          # KEYS k\xf9: not UTF-8
    r = w.call(R.SEND_BATCH_MESSAGE, {"a": "pg", "b": "Raw", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1",
                                      "h": "0", "i": "", "m": "true"}, bytes(batch))
    assert r.code == RC.SUCCESS, r.remark
    assert pull_n(w, "Raw", 2) == [b"one", b"two"]
    got = decode_messages(pull(w, "Raw", 0).body)
    assert got[0].properties["KEYS"] == "k\ufffd" and got[0].properties["TAGS"] == "TagA"
    phys = message.parse_offset_msg_id(r.ext["msgId"].split(",")[0])[2]
    v = w.call(R.VIEW_MESSAGE_BY_ID, {"offset": str(phys)})
    assert v.code == RC.SUCCESS and b"k\xf9" in v.body                     # the bytes as stored
    w.close()
    assert app.stop() == 0
    rep = check(app.cfg)
    assert rep.clean and rep.records == 2


def test_long_poll_is_answered_when_the_queue_grows(appliance_factory):
    app = appliance_factory().start()
    w, w2 = Wire("127.0.0.1", app.cfg.listenPort, timeout=10), Wire("127.0.0.1", app.cfg.listenPort)
    r0 = send_v2(w2, "Poll", b"first")
    assert r0.code == RC.SUCCESS, r0.remark
    assert pull_n(w, "Poll", 1) == [b"first"]
    t0 = time.monotonic()
    r = pull(w, "Poll", 1, flag=0x2, suspend_ms=400)                     # nothing comes: held, then 19
    assert r.code == RC.PULL_NOT_FOUND and 0.35 < time.monotonic() - t0 < 3
    sender = threading.Timer(0.5, lambda: send_v2(w2, "Poll", b"second"))
    sender.start()
    t0 = time.monotonic()
    r = pull(w, "Poll", 1, flag=0x2, suspend_ms=8000)
    took = time.monotonic() - t0
    assert r.code == RC.SUCCESS and bodies(r) == [b"second"]
    assert 0.4 < took < 4, took
    sender.join(10)                  # its reply may come after the pull's: w2 stays open until then
    w.close()
    w2.close()


def test_a_filtered_long_poll_sleeps_through_other_tags(appliance_factory):
    """As in RocketMQ, a held pull with a tag filter is woken by a message it takes, not by others:
    answered once TagA comes (not PULL_RETRY_IMMEDIATELY when the TagBs did), with the TagA only."""
    app = appliance_factory().start()
    create_topic(app, "Filtered", 1)
    w, w2 = Wire("127.0.0.1", app.cfg.listenPort, timeout=10), Wire("127.0.0.1", app.cfg.listenPort)

    def send(tag, body):
        assert send_v2(w2, "Filtered", body, message.encode_properties({"TAGS": tag})).code == RC.SUCCESS
    senders = [threading.Timer(0.3, send, ("TagB", b"b0")), threading.Timer(0.6, send, ("TagB", b"b1")),
               threading.Timer(1.2, send, ("TagA", b"a2"))]
    for s in senders:
        s.start()
    t0 = time.monotonic()
    r = pull(w, "Filtered", 0, flag=0x6, suspend_ms=8000, sub="TagA")    # SUSPEND | SUBSCRIPTION
    took = time.monotonic() - t0
    assert r.code == RC.SUCCESS and bodies(r) == [b"a2"] and r.ext["nextBeginOffset"] == "3", (r, took)
    assert 1.1 < took < 5, took
    for s in senders:
        s.join(10)
    w.close()
    w2.close()


def test_many_held_pulls_each_end_once_with_their_own_queue(appliance_factory):
    """512 pulls held on one reader (8 groups x 64 queues; half the queues written before, held at
    offset 1, half never written, held at 0): a send to a queue answers that queue's 8 holds with
    the message and no other hold; every other hold ends once, at its time-out, PULL_NOT_FOUND."""
    app = appliance_factory(readerProcessNums=1).start()
    create_topic(app, "Held", 64)
    w = Wire("127.0.0.1", app.cfg.listenPort, timeout=10)
    for q in range(32):
        assert send_v2(w, "Held", b"before", queue=q).code == RC.SUCCESS
    asyncio.run(dispatched(app))                           # offset 1 is each such queue's end, not past it
    groups = [Wire("127.0.0.1", app.cfg.listenPort, timeout=10) for _ in range(8)]
    held = {}                                              # (group, opaque) -> queue
    for g, gw in enumerate(groups):
        for q in range(64):
            opaque = gw.send(R.PULL_MESSAGE, {
                "consumerGroup": f"hg{g}", "topic": "Held", "queueId": str(q), "queueOffset": "1" if q < 32 else "0",
                "maxMsgNums": "32", "sysFlag": "2", "commitOffset": "0", "suspendTimeoutMillis": "3000",
                "subscription": "*", "subVersion": "0"})
            held[(g, opaque)] = q
    time.sleep(0.3)                                        # all of them held by now
    t0 = time.monotonic()
    assert send_v2(w, "Held", b"to-7", queue=7).code == RC.SUCCESS        # a queue written before
    assert send_v2(w, "Held", b"to-40", queue=40).code == RC.SUCCESS      # its first message
    answered = {}
    for g, gw in enumerate(groups):
        for _ in range(2):
            r = gw.read_response()
            answered[(g, r.opaque)] = (held[(g, r.opaque)], r.code, bodies(r) if r.code == RC.SUCCESS else None)
    assert time.monotonic() - t0 < 2.5                    # by the sends, not by the time-out
    assert sorted(answered.values()) == [(7, RC.SUCCESS, [b"to-7"])] * 8 + [(40, RC.SUCCESS, [b"to-40"])] * 8
    for g, gw in enumerate(groups):                        # the other 62 of each group: time-outs, once each
        for _ in range(62):
            r = gw.read_response()
            assert (g, r.opaque) not in answered and r.code == RC.PULL_NOT_FOUND
            answered[(g, r.opaque)] = (held[(g, r.opaque)], r.code, None)
        gw.sock.settimeout(0.3)
        with contextlib.suppress(TimeoutError):
            extra = gw.sock.recv(1)
            assert not extra, "more answers than pulls held"
        gw.close()
    assert set(answered) == set(held)
    w.close()


def test_queue_bounds_store_times_searches_by_time_a_message_by_offset_and_runtime_info(appliance_factory):
    app = appliance_factory().start()
    w = Wire("127.0.0.1", app.cfg.listenPort)
    q = {"topic": "Timed", "queueId": "0"}
    for i in range(4):
        assert send_v2(w, "Timed", b"t%d" % i).code == RC.SUCCESS
        time.sleep(0.03)                                                  # store times 30 ms apart
    assert len(pull_n(w, "Timed", 4)) == 4
    recs = message.decode_records(pull(w, "Timed", 0).body)
    ts = [r.store_ts for r in recs]
    assert ts == sorted(ts) and ts[3] - ts[0] >= 90, ts

    def offset(code, **kw) -> int:
        return int(w.call(code, {**q, **kw}).ext["offset"])

    assert (offset(R.GET_MIN_OFFSET), offset(R.GET_MAX_OFFSET)) == (0, 4)
    assert w.call(R.GET_EARLIEST_MSG_STORETIME, q).ext["timestamp"] == str(ts[0])
    assert w.call(R.GET_EARLIEST_MSG_STORETIME, {**q, "queueId": "3"}).ext["timestamp"] == "-1"   # an empty queue
    # the message stored nearest the time (RocketMQ 4.x): the first before them all, the last after
    assert [offset(R.SEARCH_OFFSET_BY_TIMESTAMP, timestamp=str(t)) for t in
            (ts[0] - 1000, ts[0], ts[1] - 1, ts[1], ts[1] + 2, ts[2] + 1, ts[3], ts[3] + 1000)] == [
        0, 0, 1, 1, 1, 2, 3, 3]
    assert offset(R.SEARCH_OFFSET_BY_TIMESTAMP, timestamp=str(ts[0]), queueId="3") == 0       # an empty queue
    # a record by its CommitLog offset (what a client reads out of an offset msgId)
    r = w.call(R.VIEW_MESSAGE_BY_ID, {"offset": str(recs[2].phys_offset)})
    assert r.code == RC.SUCCESS and message.decode_records(r.body)[0].body == b"t2"
    r = w.call(R.VIEW_MESSAGE_BY_ID, {"offset": str(recs[2].phys_offset + 1)})           # not a record's start
    assert r.code == RC.SYSTEM_ERROR and "can not find message by the offset" in r.remark
    r = w.call(R.VIEW_MESSAGE_BY_ID, {"offset": str(1 << 40)})
    assert r.code == RC.SYSTEM_ERROR and "can not find message by the offset" in r.remark
    info = json.loads(w.call(R.GET_BROKER_RUNTIME_INFO).body)["table"]
    end = recs[-1].phys_offset + recs[-1].total_size
    assert (info["commitLogMinOffset"], info["commitLogMaxOffset"], info["brokerRole"], info["flushDiskType"]) == (
        "0", str(end), "ASYNC_MASTER", "ASYNC_FLUSH")
    assert all(isinstance(v, str) for v in info.values())
    w.close()


def test_what_one_reader_acknowledged_every_reader_finds_by_its_offset_at_once(appliance_factory):
    """Read-your-writes by construction: the writer moves ``written`` past a record before it
    answers the send, so the other reader finds the record by its offset (VIEW_MESSAGE_BY_ID,
    CONSUMER_SEND_MSG_BACK) the moment SEND_OK arrives, whatever the dispatcher has done: here the
    dispatcher is stopped throughout."""
    app = appliance_factory().start()
    readers = [Wire("127.0.0.1", app.cfg.reader_port(i)) for i in range(2)]
    try:
        assert send_v2(readers[0], "Seen", b"first").code == RC.SUCCESS      # the topic made
        with frozen(app, "dispatcher"):
            for i in range(20):
                one, other = readers[i % 2], readers[1 - i % 2]
                sent = send_v2(one, "Seen", b"m%d" % i, "UNIQ_KEY\x01U-%d" % i)
                assert sent.code == RC.SUCCESS, sent.remark
                offset = message.parse_offset_msg_id(sent.ext["msgId"])[2]
                r = other.call(R.VIEW_MESSAGE_BY_ID, {"offset": str(offset)})
                assert r.code == RC.SUCCESS and message.decode_records(r.body)[0].body == b"m%d" % i, r.remark
                r = other.call(R.CONSUMER_SEND_MSG_BACK, {"offset": str(offset), "group": "g1", "delayLevel": "-1",
                                                          "originMsgId": "U-%d" % i, "originTopic": "Seen"})
                assert r.code == RC.SUCCESS, r.remark
            sh = app.shared()
            assert sh.control[C.DISPATCHED] < sh.control[C.WRITTEN]           # (it did not move meanwhile)
            sh.close()
        asyncio.run(dispatched(app))
        dlq = message.decode_records(pull(readers[0], "%DLQ%g1", 0).body)
        assert sorted(r.body for r in dlq) == sorted(b"m%d" % i for i in range(20))
    finally:
        for w in readers:
            w.close()


def test_pulls_of_messages_on_disk_get_rocketmqs_smaller_limits(appliance_factory):
    """A message more than accessMessageInMemoryMaxRatio of RAM behind the CommitLog's end is
    "on disk": a pull from there returns at most maxTransferCountOnMessageInDisk messages and
    maxTransferBytesOnMessageInDisk bytes (the first always).  Ratio 0 puts every message there."""
    app = appliance_factory(accessMessageInMemoryMaxRatio="0", maxTransferBytesOnMessageInDisk="8192").start()
    w = Wire("127.0.0.1", app.cfg.listenPort)
    for i in range(20):
        assert send_v2(w, "Cold", b"s%02d" % i, queue=0).code == RC.SUCCESS
        assert send_v2(w, "Cold", bytes([65 + i]) * 3000, queue=1).code == RC.SUCCESS
    assert len(pull_n(w, "Cold", 8)) == 8 and len(pull_n(w, "Cold", 2, queue=1)) == 2
    small = pull(w, "Cold", 0, queue=0)
    assert bodies(small) == [b"s%02d" % i for i in range(8)] and small.ext["nextBeginOffset"] == "8"   # count cap
    big = pull(w, "Cold", 3, queue=1)
    assert bodies(big) == [b"D" * 3000, b"E" * 3000] and big.ext["nextBeginOffset"] == "5"            # bytes cap
    w.close()


def test_offsets_and_members_are_shared_by_the_readers(appliance_factory):
    app = appliance_factory().start()
    r0, r1 = (Wire("127.0.0.1", app.cfg.reader_port(i)) for i in range(2))
    key = {"consumerGroup": "g1", "topic": "T", "queueId": "3"}
    assert r0.call(R.UPDATE_CONSUMER_OFFSET, {**key, "commitOffset": "42"}).code == RC.SUCCESS
    assert r1.call(R.QUERY_CONSUMER_OFFSET, key).ext["offset"] == "42"
    r1.oneway(R.UPDATE_CONSUMER_OFFSET, {**key, "commitOffset": "43"})
    deadline = time.monotonic() + 3
    while r0.call(R.QUERY_CONSUMER_OFFSET, key).ext["offset"] != "43" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert r0.call(R.QUERY_CONSUMER_OFFSET, key).ext["offset"] == "43"
    # membership: c1 on reader 0, c2 on reader 1; c1 hears about c2 and about its leaving
    assert heartbeat(r0, "c1", "g1").code == RC.SUCCESS
    assert [c.code for c in r0.pushed] == [R.NOTIFY_CONSUMER_IDS_CHANGED]    # its own joining
    r0.pushed.clear()
    assert heartbeat(r1, "c2", "g1").code == RC.SUCCESS
    for w in (r0, r1):
        assert json.loads(w.call(R.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "g1"}).body)["consumerIdList"] == ["c1", "c2"]
    r0.sock.settimeout(3)
    deadline = time.monotonic() + 3
    while not any(c.code == R.NOTIFY_CONSUMER_IDS_CHANGED for c in r0.pushed) and time.monotonic() < deadline:
        r0.call(R.GET_MAX_OFFSET, {"topic": "T", "queueId": "0"})
        time.sleep(0.1)
    notes = [c for c in r0.pushed if c.code == R.NOTIFY_CONSUMER_IDS_CHANGED]
    assert notes and notes[-1].ext["consumerGroup"] == "g1" and notes[-1].is_oneway
    r0.pushed.clear()
    r1.close()                                                           # c2's connection goes away
    deadline = time.monotonic() + 4
    while not r0.pushed and time.monotonic() < deadline:
        r0.call(R.GET_MAX_OFFSET, {"topic": "T", "queueId": "0"})
        time.sleep(0.1)
    assert [c.code for c in r0.pushed] == [R.NOTIFY_CONSUMER_IDS_CHANGED]
    assert json.loads(r0.call(R.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "g1"}).body)["consumerIdList"] == ["c1"]
    # committed offsets survive a restart (consumerOffset.json): written every 5 s while running too
    deadline, persisted = time.monotonic() + 12, None
    while persisted != 43 and time.monotonic() < deadline:
        time.sleep(0.5)
        with contextlib.suppress(FileNotFoundError):
            with open(f"{app.cfg.config_dir}/consumerOffset.json") as f:
                persisted = loads_tolerant(f.read())["offsetTable"].get("T@g1", {}).get("3")
    assert persisted == 43
    r0.close()
    assert app.stop() == 0
    app.start()
    w = Wire("127.0.0.1", app.cfg.listenPort)
    assert w.call(R.QUERY_CONSUMER_OFFSET, key).ext["offset"] == "43"
    w.close()
    with open(f"{app.cfg.config_dir}/consumerOffset.json") as f:
        assert loads_tolerant(f.read())["offsetTable"]["T@g1"]["3"] == 43


def test_refused_consumer_requests_say_what_is_wrong_and_register_nothing(appliance_factory):
    app = appliance_factory().start()
    w = Wire("127.0.0.1", app.cfg.listenPort)
    good = json.loads(heartbeat_body("c1", "g1"))
    bad = {**good, "consumerDataSet": [{**good["consumerDataSet"][0], "subscriptionDataSet": [
        {"topic": "T", "subString": "*", "subVersion": "x"}]}]}
    r = w.call(R.HEART_BEAT, {}, json.dumps(bad).encode())
    assert r.code == RC.SYSTEM_ERROR
    assert r.remark.startswith("heartbeat body does not parse: subscription to T: invalid literal"), r.remark
    for body in (b"[1]", b'{"clientID": "c1", "consumerDataSet": [7]}'):
        assert "heartbeat body does not parse: " in w.call(R.HEART_BEAT, {}, body).remark
    r = w.call(R.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "g1"})
    assert r.code == RC.SYSTEM_ERROR and "no consumer for this group" in r.remark      # nothing registered
    long_group = {"consumerGroup": "g" * 400, "topic": "T", "queueId": "0"}
    for r, size in ((w.call(R.UPDATE_CONSUMER_OFFSET, {**long_group, "commitOffset": "1"}), 402),
                    (w.call(R.QUERY_CONSUMER_OFFSET, long_group), 402),
                    (pull(w, "TBW102", 0, flag=0x1, group="g" * 400), 407)):        # a pull that commits
        assert r.code == RC.SYSTEM_ERROR
        assert r.remark == f"topic@group is {size} bytes; the offset table holds at most 383", r.remark
    assert "longer than 255 bytes" in heartbeat(w, "c1", "g" * 256).remark
    assert heartbeat(w, "c1", "g1").code == RC.SUCCESS
    assert json.loads(w.call(R.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "g1"}).body)["consumerIdList"] == ["c1"]
    longest, long_id = "G" * 255, "10.0.0.1@" + "i" * 239     # RocketMQ's longest group name; our longest id
    assert heartbeat(w, long_id, longest, "T" * 127).code == RC.SUCCESS
    assert json.loads(w.call(R.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": longest}).body)["consumerIdList"] == [long_id]
    key = {"consumerGroup": longest, "topic": "T" * 127, "queueId": "1"}
    assert w.call(R.UPDATE_CONSUMER_OFFSET, {**key, "commitOffset": "5"}).code == RC.SUCCESS
    assert w.call(R.QUERY_CONSUMER_OFFSET, key).ext["offset"] == "5"
    w.close()
    assert "Traceback" not in app.log_text()          # refusals, not failures of the reader


def test_a_full_offset_table_refuses_new_offsets_and_keeps_serving(appliance_factory):
    """shmOffsetSlots bounds the (topic@group, queue) offsets: past it a new commit is refused
    with a remark naming the key to raise, the offsets it holds still move, pulls are served."""
    app = appliance_factory(shmOffsetSlots="16").start()
    w = Wire("127.0.0.1", app.cfg.listenPort)
    key = {"consumerGroup": "g1", "topic": "T"}
    for q in range(16):
        assert w.call(R.UPDATE_CONSUMER_OFFSET, {**key, "queueId": str(q), "commitOffset": str(q)}).code == RC.SUCCESS
    r = w.call(R.UPDATE_CONSUMER_OFFSET, {**key, "queueId": "16", "commitOffset": "1"})
    assert r.code == RC.SYSTEM_ERROR and r.remark == (
        "the broker's consumer offset table is full (16 offsets, shmOffsetSlots): this offset is not kept")
    assert w.call(R.UPDATE_CONSUMER_OFFSET, {**key, "queueId": "3", "commitOffset": "30"}).code == RC.SUCCESS
    assert w.call(R.QUERY_CONSUMER_OFFSET, {**key, "queueId": "3"}).ext["offset"] == "30"
    assert send_v2(w, "Full", b"x").code == RC.SUCCESS
    assert pull_n(w, "Full", 1, flag=0x1, group="g2") == [b"x"]            # its commit is not kept, the pull is
    w.close()
    assert "consumer offsets of new (topic@group, queue)s are refused: the table is full (16 offsets" in app.log_text()
    status = [sys.executable, "-m", "rocketbox.appliance", "status", "-c", app.conf]
    out = subprocess.run(status, cwd=ROOT, capture_output=True, text=True).stdout
    assert "table consumer offsets NEAR FULL: 16 of 16 (raise shmOffsetSlots)" in out, out
    assert "table topics" not in out                                       # only what is near full
    out = subprocess.run(status + ["--tables"], cwd=ROOT, capture_output=True, text=True).stdout
    assert re.search(r"\nconsumer offsets +16 +16 +100\.0% +shmOffsetSlots +\d+\.\d MiB\n", out), out
    assert re.search(r"\nqueues +\d+ +1024 +\d+\.\d% +shmQueueSlots ", out), out
    assert "Traceback" not in app.log_text()


def test_more_queues_than_a_process_may_hold_open_are_dispatched_and_pulled_across_a_restart(appliance_factory):
    """ulimit -n 1024 and 600 queues of one message each: every queue's file counts against each
    process's budget of open files (a sixth of the limit: 170), so the dispatcher and the readers
    release and map again rather than die at the limit (before: the dispatcher held two
    descriptors per consume-queue file it ever wrote, and died at ~500 queues here)."""
    app = appliance_factory(shmQueueSlots="2048").start(nofile=1024)
    w = Wire("127.0.0.1", app.cfg.listenPort)
    topics = [f"Many{t}" for t in range(3)]
    for t in topics:
        create_topic(app, t, 200)
    for t in topics:
        for q in range(200):
            assert send_v2(w, t, f"{t}/{q}".encode(), queue=q).code == RC.SUCCESS
    w.close()

    def every_queue_pulls() -> None:
        w = Wire("127.0.0.1", app.cfg.listenPort)
        for t in topics:
            for q in range(200):
                assert pull_n(w, t, 1, queue=q) == [f"{t}/{q}".encode()], (t, q)
        w.close()
    every_queue_pulls()
    assert subprocess.run([sys.executable, "-m", "rocketbox.appliance", "status", "-c", app.conf], cwd=ROOT,
                          capture_output=True).returncode == 0
    for role in ("dispatcher", "reader-0", "reader-1"):
        fds = len(os.listdir(f"/proc/{app.role_pid(role)}/fd"))
        assert fds < 1024 // 2, (role, fds)
    assert "Too many open files" not in app.log_text() and "Traceback" not in app.log_text()
    assert app.stop() == 0
    app.start(nofile=1024)
    every_queue_pulls()


def test_past_the_connection_limit_a_new_client_is_closed_at_once_and_it_is_said_once(appliance_factory):
    """ulimit -n 256: HAProxy's maxconn fits it, and a connection past the admission limit is
    closed at once instead of waiting in the kernel's backlog for an answer that never comes; the
    role logs it once and `appliance status` shows the connections against the limit."""
    from rocketbox.haproxy.service import admission_limit, connections, frontend_stats
    app = appliance_factory().start(nofile=256)
    _, _, maxconn = connections(frontend_stats(app.cfg))
    limit = admission_limit(maxconn)
    assert 16 <= limit < maxconn <= 128, (limit, maxconn)
    held = [Wire("127.0.0.1", app.cfg.listenPort) for _ in range(limit)]
    assert held[-1].call(R.GET_BROKER_RUNTIME_INFO, {}).code == RC.SUCCESS
    deadline = time.monotonic() + 10
    while connections(frontend_stats(app.cfg))[1] < limit:
        assert time.monotonic() < deadline, frontend_stats(app.cfg)
        time.sleep(0.1)
    for _ in range(3):
        t0 = time.monotonic()
        try:                                                           # closed (or reset) at once, not parked
            with socket.create_connection(("127.0.0.1", app.cfg.listenPort), timeout=5) as s:
                s.sendall(codec.encode(codec.Command(R.GET_BROKER_RUNTIME_INFO, {})))
                assert s.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            pass
        assert time.monotonic() - t0 < 2
    assert held[0].call(R.GET_BROKER_RUNTIME_INFO, {}).code == RC.SUCCESS      # those it holds are served
    while "new client connections are refused" not in app.log_text():
        assert time.monotonic() < deadline + 10, app.log_text()[-2000:]
        time.sleep(0.2)
    out = subprocess.run([sys.executable, "-m", "rocketbox.appliance", "status", "-c", app.conf], cwd=ROOT,
                         capture_output=True, text=True).stdout
    assert f"connections {limit} of {limit}, 3 refused at the limit since HAProxy started NEAR FULL" in out, out
    for w in held:
        w.close()
    while connections(frontend_stats(app.cfg))[1] > 0:                # HAProxy sees the closes
        assert time.monotonic() < deadline + 20
        time.sleep(0.1)
    w = Wire("127.0.0.1", app.cfg.listenPort)
    assert w.call(R.GET_BROKER_RUNTIME_INFO, {}).code == RC.SUCCESS
    w.close()
    time.sleep(2 * 2.0)                                                # two more looks by the role
    assert app.log_text().count("new client connections are refused") == 1
    assert app.stop() == 0                                             # and a restart serves again
    app.start(nofile=256)
    w = Wire("127.0.0.1", app.cfg.listenPort)
    assert w.call(R.GET_BROKER_RUNTIME_INFO, {}).code == RC.SUCCESS
    w.close()


def test_offsets_racing_for_the_last_slots_are_kept_or_refused_never_acknowledged_and_dropped(appliance_factory):
    """Pipelined bursts of new offsets from two connections on each reader cross the end of the
    table at once: the room check passes more than fit, the writer drops the rest, and exactly those
    are answered with the table-full error; every SUCCESS reads back its offset."""
    slots = 100
    app = appliance_factory(shmOffsetSlots=str(slots)).start()
    wires = [Wire("127.0.0.1", app.cfg.reader_port(i % 2)) for i in range(4)]
    sent, asked = {}, {}
    for i, w in enumerate(wires):                              # 4 x 40 = 160 new offsets, all pipelined
        for q in range(40):
            qid = i * 40 + q
            sent[qid] = 1000 + qid
            opaque = w.send(R.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "race", "topic": "T", "queueId": str(qid),
                                                       "commitOffset": str(sent[qid])})
            asked[(i, opaque)] = qid
    answers = {}
    for i, w in enumerate(wires):          # by opaque: a refusal is answered at once, before the commits
        for _ in range(40):                # ahead of it that wait for the writer
            r = w.read_response()
            answers[asked[(i, r.opaque)]] = r
    ok = {qid for qid, r in answers.items() if r.code == RC.SUCCESS}
    refused = {qid for qid, r in answers.items() if r.code == RC.SYSTEM_ERROR and "table is full" in r.remark}
    late = {qid for qid, r in answers.items() if r.code == RC.SYSTEM_ERROR and "not applied within" in r.remark}
    # never more SUCCESS than the table holds (before: 160); on a loaded box a few may be answered
    # "not applied within 3 s" (an error, so not acknowledged), which is the safe side
    assert len(ok) <= slots and len(ok) + len(late) >= slots and ok | refused | late == set(sent), \
        (len(ok), len(refused), len(late), {r.remark for r in answers.values() if r.code != RC.SUCCESS})

    def read_back(wires) -> None:
        for qid in sorted(sent):
            r = wires[qid % 2].call(R.QUERY_CONSUMER_OFFSET, {"consumerGroup": "race", "topic": "T", "queueId": str(qid)})
            if qid in ok:
                assert r.ext["offset"] == str(sent[qid]), qid
            elif qid in refused:                                       # "table is full": not kept
                assert r.code != RC.SUCCESS or r.ext["offset"] in ("0", "-1"), (qid, r.code, r.ext)
    read_back(wires)
    for w in wires:
        w.close()
    assert "Traceback" not in app.log_text()
    assert app.stop() == 0                                             # consumerOffset.json has the same
    app.start()
    wires = [Wire("127.0.0.1", app.cfg.reader_port(i)) for i in range(2)]
    read_back(wires)
    for w in wires:
        w.close()


def test_a_reader_with_all_client_rows_taken_refuses_new_members_and_keeps_the_others(appliance_factory):
    """A reader holds shmClientRows (group, client) members: one more is refused with a remark
    naming what to raise, logged once however often it asks, and a member that leaves makes room."""
    rows = 40
    app = appliance_factory(shmClientRows=str(rows)).start()
    w = Wire("127.0.0.1", app.cfg.reader_port(0))              # straight to one reader
    for i in range(rows):
        w.send(R.HEART_BEAT, {}, heartbeat_body(f"c{i}", "crowd"))
    codes = [w.read_response().code for _ in range(rows)]
    assert codes == [RC.SUCCESS] * rows
    for _ in range(3):
        r = heartbeat(w, "late", "crowd")
        assert r.code == RC.SYSTEM_ERROR and r.remark == (
            f"this reader already holds {rows} consumer group members (a consumer takes one per group it "
            f"is in): consumer late of group crowd is not registered; raise shmClientRows, or readerProcessNums")
    assert heartbeat(w, "c7", "crowd").code == RC.SUCCESS                  # a member it holds stays one
    members = json.loads(w.call(R.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "crowd"}).body)["consumerIdList"]
    assert len(members) == rows and "late" not in members and "c7" in members
    assert w.call(R.UNREGISTER_CLIENT, {"clientID": "c7", "consumerGroup": "crowd"}).code == RC.SUCCESS
    assert heartbeat(w, "late", "crowd").code == RC.SUCCESS
    members = json.loads(w.call(R.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "crowd"}).body)["consumerIdList"]
    assert len(members) == rows and "late" in members and "c7" not in members
    other = Wire("127.0.0.1", app.cfg.reader_port(1))          # the other reader has rows of its own
    assert heartbeat(other, "elsewhere", "crowd").code == RC.SUCCESS
    members = json.loads(w.call(R.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "crowd"}).body)["consumerIdList"]
    assert len(members) == rows + 1 and "elsewhere" in members
    w.close()
    other.close()
    assert app.log_text().count(f"this reader already holds {rows} consumer group members") == 1
    assert "Traceback" not in app.log_text()


def test_full_topic_and_queue_tables_refuse_with_remarks_and_the_store_still_starts(appliance_factory):
    """shmTopicSlots / shmQueueSlots bound the shared tables: past them a new topic (created or
    auto-created by a send) and a first write to a new queue are refused naming the key to raise,
    nothing refused is persisted or stored, and the writer lives on.  A store that holds more than
    broker.conf makes room for does not start: one line naming the key, exit 2."""
    app = appliance_factory(shmTopicSlots="20", shmQueueSlots="24").start()
    w = Wire("127.0.0.1", app.cfg.listenPort)
    created = []
    for i in range(20):
        r = w.call(R.UPDATE_AND_CREATE_TOPIC, {"topic": f"A{i}", "defaultTopic": "TBW102", "readQueueNums": "12",
                                               "writeQueueNums": "12", "perm": "6", "topicFilterType": "SINGLE_TAG",
                                               "topicSysFlag": "0", "order": "false"})
        if r.code != RC.SUCCESS:
            assert r.remark == f"create topic[A{i}] failed: the broker's topic table is full (20 topics, shmTopicSlots)"
            break
        created.append(f"A{i}")
    assert 3 <= len(created) < 20
    r = send_v2(w, "NewOne", b"x")
    assert r.code == RC.SYSTEM_ERROR and "the broker's topic table is full" in r.remark
    held = int(app.shared().control[C.QUEUE_COUNT])              # queue slots already given out
    codes = [send_v2(w, t, b"m", queue=q).code for t in created[:2] for q in range(12)]
    assert codes == [RC.SUCCESS] * (24 - held) + [RC.SYSTEM_ERROR] * held
    r = send_v2(w, created[2], b"y", queue=0)
    assert r.code == RC.SYSTEM_ERROR and r.remark == ("the broker's queue table is full (24 queues, shmQueueSlots): "
                                                      "a queue not written before cannot take messages")
    assert send_v2(w, created[0], b"z", queue=0).code == RC.SUCCESS            # a queue it holds takes more
    w.close()
    assert app.stop() == 0
    with open(f"{app.cfg.config_dir}/topics.json") as f:
        assert "NewOne" not in f.read()
    app.start()                                     # what it persisted fits what it has room for
    assert app.stop() == 0
    with open(app.conf) as f:
        conf = f.read()
    with open(app.conf, "w") as f:
        f.write(conf.replace("shmTopicSlots=20", "shmTopicSlots=16"))
    r = app.cmd("start")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"appliance: the store does not fit: shared topic table is full (16 topics, see shmTopicSlots); "
        f"raise it in {app.conf}"], r.stderr


def test_malformed_frame_closes_only_that_connection(appliance_factory):
    app = appliance_factory().start()
    good, bad = Wire("127.0.0.1", app.cfg.listenPort), Wire("127.0.0.1", app.cfg.listenPort)
    assert send_v2(good, "Live", b"before").code == RC.SUCCESS
    bad.sock.sendall(b"\x7f\xff\xff\xff" + b"\x00" * 64)                 # a 2 GiB frame: not RocketMQ
    assert bad.closed_by_peer()
    assert send_v2(good, "Live", b"after").code == RC.SUCCESS
    assert pull_n(good, "Live", 2) == [b"before", b"after"]
    garbage = Wire("127.0.0.1", app.cfg.listenPort)
    garbage.sock.sendall(codec.encode(codec.Command(R.GET_MAX_OFFSET, {"topic": "Live"})))   # queueId missing
    r = garbage.read_response()
    assert r.code == RC.SYSTEM_ERROR and "queueId" in r.remark
    assert "closing connection" in app.log_text()
    good.close()


def test_sync_flush_replies_after_the_flush(appliance_factory):
    app = appliance_factory(flushDiskType="SYNC_FLUSH").start()
    w = Wire("127.0.0.1", app.cfg.listenPort)
    sh = app.shared()
    try:
        for i in range(20):
            r = send_v2(w, "Durable", b"x" * 100)
            assert r.code == RC.SUCCESS
            _ip, _port, phys = message.parse_offset_msg_id(r.ext["msgId"])
            assert sh.control[C.FLUSHED] > phys          # on disk before the reply
    finally:
        sh.close()
        w.close()


def test_sync_flush_times_out_while_the_flusher_is_frozen_and_recovers(appliance_factory):
    """The flusher stopped (SIGSTOP): each pipelined send gets FLUSH_DISK_TIMEOUT after
    syncFlushTimeout, stored all the same (WAIT=TRUE too), but those whose WAIT is not true (Java's
    Boolean.parseBoolean) are answered at once; once the flusher runs again sends succeed."""
    app = appliance_factory(flushDiskType="SYNC_FLUSH", syncFlushTimeout="700").start()
    w = Wire("127.0.0.1", app.cfg.listenPort)
    try:
        assert send_v2(w, "Durable", b"first").code == RC.SUCCESS
        with frozen(app, "flusher"):
            t0 = time.monotonic()
            opaques = [w.send(R.SEND_MESSAGE_V2, send_ext("Durable", "WAIT\x01TRUE" if i == 5 else "", queue=i % 4),
                              f"frozen-{i}".encode()) for i in range(6)]
            no_wait = {w.send(R.SEND_MESSAGE_V2, send_ext("Durable", f"WAIT\x01{v}", queue=3), f"no-wait-{v}".encode())
                       for v in ("false", "FALSE", "no")}
            first = [w.read_response() for _ in no_wait]
            assert {r.opaque for r in first} == no_wait and {r.code for r in first} == {RC.SUCCESS}
            assert time.monotonic() - t0 < 0.5
            replies = {r.opaque: r for r in (w.read_response() for _ in opaques)}
            waited = time.monotonic() - t0
            assert [replies[o].code for o in opaques] == [RC.FLUSH_DISK_TIMEOUT] * 6
            assert all(replies[o].remark == "FLUSH_DISK_TIMEOUT" and replies[o].ext["msgId"] for o in opaques)
            assert 0.6 < waited < 5, waited
        assert send_v2(w, "Durable", b"after").code == RC.SUCCESS
        got = sum((pull_n(w, "Durable", n, queue=q) for q, n in ((0, 4), (1, 2), (2, 1), (3, 4))), [])
        assert sorted(got) == sorted([b"first", b"after", b"no-wait-false", b"no-wait-FALSE", b"no-wait-no"]
                                     + [f"frozen-{i}".encode() for i in range(6)])
    finally:
        w.close()


def test_born_host_is_the_client_behind_haproxy_and_readers_take_plain_connections(appliance_factory):
    """HAProxy sends PROXY v2 headers to the readers: a record's born host is the producer's own
    address, not HAProxy's; a tool connecting straight to a reader (no header) is served too."""
    app = appliance_factory().start()
    w = Wire("127.0.0.1", app.cfg.listenPort)
    direct = Wire("127.0.0.1", app.cfg.reader_port(0))
    try:
        assert send_v2(w, "Born", b"via-haproxy").code == RC.SUCCESS
        assert send_v2(direct, "Born", b"direct").code == RC.SUCCESS
        deadline, recs = time.monotonic() + 5, {}
        while len(recs) < 2 and time.monotonic() < deadline:      # a reply comes before dispatch
            recs = {r.body: r for r in message.decode_records(pull(w, "Born", 0).body)}
            time.sleep(0.02)
        assert recs[b"via-haproxy"].born_port == w.sock.getsockname()[1]
        assert recs[b"direct"].born_port == direct.sock.getsockname()[1]
        assert recs[b"via-haproxy"].born_ip == b"\x7f\x00\x00\x01"
    finally:
        direct.close()
        w.close()


def test_a_frozen_writer_gets_sends_refused_busy_while_the_reader_keeps_serving(appliance_factory):
    """The writer stopped (SIGSTOP): the send it holds waits; sends queued behind it are answered
    SYSTEM_BUSY (TIMEOUT_CLEAN_QUEUE) after waitTimeMillsInSendQueue, and once it has been stuck
    osPageCacheBusyTimeOutMills new ones are refused at once (REJECTREQUEST), while the same
    connection's other requests are answered.  Once it runs again the held send is stored and
    answered, sends succeed, and nothing refused was stored."""
    app = appliance_factory(waitTimeMillsInSendQueue="300", osPageCacheBusyTimeOutMills="1000").start()
    w = Wire("127.0.0.1", app.cfg.listenPort)
    try:
        assert send_v2(w, "Flow", b"before").code == RC.SUCCESS
        with frozen(app, "writer"):
            t0 = time.monotonic()
            stuck = w.send(R.SEND_MESSAGE_V2, send_ext("Flow"), b"stuck")          # in the ring, not taken
            time.sleep(0.05)
            queued = [w.send(R.SEND_MESSAGE_V2, send_ext("Flow"), f"queued-{i}".encode()) for i in range(3)]
            replies = [w.read_response() for _ in queued]
            assert [r.opaque for r in replies] == queued and {r.code for r in replies} == {RC.SYSTEM_BUSY}
            assert all(r.remark.startswith("[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while")
                       for r in replies), replies[0].remark
            assert 0.25 < time.monotonic() - t0 < 0.9
            assert w.call(R.GET_BROKER_RUNTIME_INFO).code == RC.SUCCESS           # the reader still serves
            time.sleep(max(0.0, t0 + 1.1 - time.monotonic()))
            t1 = time.monotonic()
            refused = send_v2(w, "Flow", b"refused")
            assert refused.code == RC.SYSTEM_BUSY and time.monotonic() - t1 < 0.5
            assert refused.remark == "[REJECTREQUEST]system busy, start flow control for a while"
        late = w.read_response()
        assert late.opaque == stuck and late.code == RC.SUCCESS
        assert send_v2(w, "Flow", b"after").code == RC.SUCCESS
        assert pull_n(w, "Flow", 3) == [b"before", b"stuck", b"after"]
    finally:
        w.close()


def test_a_client_that_reads_no_replies_costs_a_reader_a_few_mib_and_gets_them_all_later(appliance_factory):
    """2,000 pipelined pulls of 32 KiB-odd each (~70 MB of replies) from a client that reads
    nothing for a while: the reader stops reading it once a few MiB wait (its memory grows by
    tens of MiB at most, not 70 MB) and serves other connections; when the client reads, every
    reply comes, in order, each with its 32 messages."""
    import psutil
    app = appliance_factory().start()
    reader = psutil.Process(app.role_pid("reader-0"))
    direct = Wire("127.0.0.1", app.cfg.reader_port(0))
    try:
        for i in range(32):
            direct.send(R.SEND_MESSAGE_V2, send_ext("Slow"), bytes([65 + i % 26]) * 1024)
        assert {direct.read_response().code for _ in range(32)} == {RC.SUCCESS}
        assert len(pull_n(direct, "Slow", 32)) == 32
        before = reader.memory_info().rss
        opaques = [direct.send(R.PULL_MESSAGE, {"consumerGroup": "g1", "topic": "Slow", "queueId": "0",
                                                "queueOffset": "0", "maxMsgNums": "32", "sysFlag": "0",
                                                "commitOffset": "0", "suspendTimeoutMillis": "0",
                                                "subscription": "*", "subVersion": "0"}) for _ in range(2000)]
        time.sleep(1.5)
        grown = (reader.memory_info().rss - before) >> 20
        assert grown < 40, f"reader-0 grew by {grown} MiB holding replies nobody reads"
        other = Wire("127.0.0.1", app.cfg.reader_port(0))
        assert other.call(R.GET_BROKER_RUNTIME_INFO).code == RC.SUCCESS     # the reader serves the others
        other.close()
        for o in opaques:
            r = direct.read_response()
            assert (r.opaque, r.code, len(bodies(r))) == (o, RC.SUCCESS, 32)
    finally:
        direct.close()


def test_queue_locks_are_the_appliances_whichever_reader_a_client_asks(appliance_factory):
    """LOCK_BATCH_MQ / UNLOCK_BATCH_MQ (orderly consumers) through reader 0 and reader 1 share one
    table: a queue A holds is refused to B on the other reader until A unlocks it; a body that
    does not parse is refused with what is wrong, and the connection goes on."""
    app = appliance_factory().start()
    r0, r1 = (Wire("127.0.0.1", app.cfg.reader_port(i)) for i in range(2))

    def lock(w, client, queues, code=R.LOCK_BATCH_MQ):
        body = json.dumps({"clientId": client, "consumerGroup": "ordered",
                           "mqSet": [{"brokerName": app.cfg.brokerName, "queueId": q, "topic": "T"} for q in queues]})
        resp = w.call(code, {}, body.encode())
        assert resp.code == RC.SUCCESS, resp.remark
        return sorted(m["queueId"] for m in json.loads(resp.body)["lockOKMQSet"]) if code == R.LOCK_BATCH_MQ else None

    assert lock(r0, "A", [0, 1]) == [0, 1]
    assert lock(r1, "B", [1, 2, 3]) == [2, 3]
    assert lock(r0, "A", [0, 1, 2]) == [0, 1]
    lock(r1, "A", [1], R.UNLOCK_BATCH_MQ)                 # unlocked through the other reader
    assert lock(r1, "B", [1]) == [1]
    bad = r0.call(R.LOCK_BATCH_MQ, {}, b'{"clientId":"A"}')
    assert (bad.code, bad.remark) == (RC.SYSTEM_ERROR, "lock body does not parse: no consumerGroup")
    assert lock(r0, "A", [0]) == [0]
    r0.close(), r1.close()
