"""RocketMQ 5.x's official Python client (``rocketmq-python-client``, run from ``<venv>/rocketmq5``
as its own process: its package name is the 4.x C++ client's too) against the gRPC front
(grpcfront/): its producer starts (routes, telemetry settings), sends normal, FIFO and delay
messages; what it sent is stored as 4.x records that 4.x consumers, the Java 4.9.8 client among
them, read (tags, keys, the client's message id as UNIQ_KEY, user properties, the message group as
__SHARDINGKEY, in queue order), a delay message once its time is up; a delivery time past the
timers' horizon and an unknown topic are refused and nothing of them is stored."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest

from rocketbox.grpcfront import v2
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.store import message
from tests.integration import javaclient
from tests.integration.harness import ROOT, create_topic, dispatched, wait_route
from tests.integration.test_readers import pull, send_v2
from tests.integration.wire import Wire

PROTOCOL_DIR = v2.default_dir()


def run_5x(script: str, *args: str, timeout: float = 60) -> list[str]:
    env = dict(os.environ, PYTHONPATH=PROTOCOL_DIR)
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "integration", "grpc5", script), *args],
                       env=env, capture_output=True, text=True, timeout=timeout, cwd="/tmp")
    assert p.returncode == 0, p.stdout + p.stderr[-4000:]
    return p.stdout.splitlines()


NEEDS_5X = pytest.mark.skipif(not os.path.isdir(os.path.join(PROTOCOL_DIR, "rocketmq", "v5")),
                              reason="rocketmq-python-client is not installed in <venv>/rocketmq5: ./install.sh installs it")


def make_group(app, group: str, **config) -> None:
    """As ``mqadmin updateSubGroup`` does (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP), then until the
    broker's groups have it as sent."""
    w = Wire("127.0.0.1", app.cfg.listenPort)
    try:
        assert w.call(R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, json.dumps({"groupName": group, **config}).encode()).code == 0
        deadline = time.monotonic() + 10
        while True:
            table = json.loads(w.call(R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG).body)["subscriptionGroupTable"]
            if all(table.get(group, {}).get(k) == v for k, v in config.items()):
                return
            assert time.monotonic() < deadline, table
            time.sleep(0.1)
    finally:
        w.close()


@NEEDS_5X
def test_the_official_5x_producer_sends_what_4x_consumers_read(appliance_factory, request, tmp_path):
    app = appliance_factory(grpc=True, namesrv=True).start()
    create_topic(app, "Grpc5", 2)
    wait_route(app, "Grpc5")
    lines = run_5x("produce.py", f"127.0.0.1:{app.cfg.grpcListenPort}", "Grpc5", "6")
    sent = [ln.split() for ln in lines if ln.startswith("sent ")]
    assert [(s[1], s[2]) for s in sent] == [("normal", str(i)) for i in range(6)] + [
        ("fifo", str(i)) for i in range(6)] + [("delay", "0")], lines
    refused = {ln.split(":")[0]: ln for ln in lines if ln.startswith("refused ")}
    assert "ILLEGAL_DELIVERY_TIME" in refused["refused too late"] or "40012" in refused["refused too late"], lines
    assert "NoSuchTopic5x route" in refused["refused unknown topic"], lines        # (QueryRoute: TOPIC_NOT_FOUND)
    ids = {s[3]: (s[1], int(s[2])) for s in sent}
    deadline, got = time.monotonic() + 20, []
    w = Wire("127.0.0.1", app.cfg.listenPort)
    try:
        while len(got) < len(ids):                  # the delay message comes once its time is up (2 s)
            assert time.monotonic() < deadline, [r.properties["UNIQ_KEY"] for r in got]
            time.sleep(0.5)
            asyncio.run(dispatched(app))
            got = [r for q in (0, 1) for r in message.decode_records(pull(w, "Grpc5", 0, queue=q).body)]
    finally:
        w.close()
    assert sorted(r.properties["UNIQ_KEY"] for r in got) == sorted(ids)          # each once, nothing else stored
    for r in got:
        kind, i = ids[r.properties["UNIQ_KEY"]]
        if kind == "normal":
            assert (r.body, r.properties["TAGS"], r.properties["KEYS"], r.properties["p"]) == (
                b"grpc-%d" % i, "TagA", f"k{i}", str(i)), r.properties
        elif kind == "fifo":
            assert (r.body, r.properties["TAGS"], r.properties["__SHARDINGKEY"]) == (b"fifo-%d" % i, "TagF", "g1")
        else:
            born = r.born_ts
            assert (r.body, r.properties["TAGS"]) == (b"later", "TagD") and r.store_ts >= born + 1000, r
        assert r.born_ip == bytes([127, 0, 0, 1]) and r.born_port > 0 and r.topic == "Grpc5"
    fifo = [r for r in got if r.properties.get("__SHARDINGKEY") == "g1"]
    assert len({r.queue_id for r in fifo}) == 1                                  # one group, one queue, in order
    assert [r.body for r in sorted(fifo, key=lambda r: r.queue_offset)] == [b"fifo-%d" % i for i in range(6)]
    # the real Java 4.9.8 client reads them as any: the 5.x message id is its msgId, tags, keys, properties
    if javaclient.missing():                  # (where it cannot run, the rest still checks the 5.x client)
        return
    out = javaclient.run(request.getfixturevalue("java_classes"), "PrintConsumer", app.namesrv, "Grpc5", "java-reads-5x", str(len(ids)),
                         logs=str(tmp_path / "java-logs"))
    seen = {f[1]: f[2:] for f in (ln.split(" ", 6) for ln in out.splitlines() if ln.startswith("msg "))}
    assert sorted(seen) == sorted(ids), out
    for msg_id, (tags, keys, p, group, body) in seen.items():
        kind, i = ids[msg_id]
        assert (tags, keys, p, group, body) == {"normal": ("TagA", f"k{i}", str(i), "-", f"grpc-{i}"),
                                                "fifo": ("TagF", "null", "-", "g1", f"fifo-{i}"),
                                                "delay": ("TagD", "null", "-", "-", "later")}[kind], out
    assert app.stop() == 0


class Raw:
    """The 5.x protocol's calls, made by hand (``grpc``), for what the official clients never send."""

    def __init__(self, port: int):
        import grpc
        self.proto = v2.load()
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")

    def call(self, method: str, request, response):
        return self.channel.unary_unary(f"/{v2.SERVICE}/{method}", request_serializer=lambda r: r if isinstance(r, bytes)
                                        else r.SerializeToString(), response_deserializer=response.FromString)(request, timeout=10)

    def receive(self, group: str, topic: str, invisible_ms: int = 30_000, poll_ms: int = 0, sql: str | None = None,
                batch: int = 4) -> list:
        p = self.proto
        req = p.ReceiveMessageRequest(batch_size=batch)
        req.group.name, req.message_queue.topic.name, req.message_queue.id = group, topic, -1
        req.invisible_duration.FromMilliseconds(invisible_ms)
        req.long_polling_timeout.FromMilliseconds(poll_ms)
        if sql is not None:
            req.filter_expression.type, req.filter_expression.expression = p.enum("FilterType", "SQL"), sql
        stream = self.channel.unary_stream(f"/{v2.SERVICE}/ReceiveMessage", request_serializer=lambda r: r.SerializeToString(),
                                           response_deserializer=p.ReceiveMessageResponse.FromString)
        return list(stream(req, timeout=poll_ms / 1000 + 10))

    def ack(self, group: str, topic: str, *handles: str):
        req = self.proto.AckMessageRequest()
        req.group.name, req.topic.name = group, topic
        for h in handles:
            req.entries.add(message_id="X", receipt_handle=h)
        return self.call("AckMessage", req, self.proto.AckMessageResponse)

    def change(self, group: str, topic: str, handle: str, ms: int):
        req = self.proto.ChangeInvisibleDurationRequest(receipt_handle=handle)
        req.group.name, req.topic.name = group, topic
        req.invisible_duration.FromMilliseconds(ms)
        return self.call("ChangeInvisibleDuration", req, self.proto.ChangeInvisibleDurationResponse)

    def close(self) -> None:
        self.channel.close()


def test_bad_requests_get_grpc_and_5x_codes_and_store_nothing(appliance_factory):
    import grpc
    proto = v2.load()
    app = appliance_factory(grpc=True, autoCreateSubscriptionGroup="false").start()
    create_topic(app, "Grpc5Bad", 1)
    make_group(app, "g")
    channel = grpc.insecure_channel(f"127.0.0.1:{app.cfg.grpcListenPort}")

    def call(method: str, request, response):
        return channel.unary_unary(f"/{v2.SERVICE}/{method}", request_serializer=lambda r: r if isinstance(r, bytes)
                                   else r.SerializeToString(), response_deserializer=response.FromString)(request, timeout=10)
    try:
        with pytest.raises(grpc.RpcError) as e:                       # not a protobuf SendMessageRequest
            call("SendMessage", b"\xff\xff\xff\xff", proto.SendMessageResponse)
        assert (e.value.code(), e.value.details()) == (grpc.StatusCode.INTERNAL, "Invalid protobuf byte sequence")
        assert call("SendMessage", proto.SendMessageRequest(), proto.SendMessageResponse).status.code == \
            proto.code("BAD_REQUEST")
        route = proto.QueryRouteRequest()
        route.topic.name = "NoSuchTopic"
        assert call("QueryRoute", route, proto.QueryRouteResponse).status.code == proto.code("TOPIC_NOT_FOUND")
        route.topic.name = "Grpc5Bad"
        got = call("QueryRoute", route, proto.QueryRouteResponse)
        assert (got.status.code, [q.id for q in got.message_queues]) == (proto.code("OK"), [0])
        assert got.message_queues[0].permission == proto.enum("Permission", "READ_WRITE")
        send = proto.SendMessageRequest()
        for topic, qid, mid in (("Grpc5Bad", 0, "A1"), ("Grpc5Bad", 7, "A2")):    # the second: no such queue
            m = send.messages.add()
            m.topic.name, m.body, m.system_properties.message_id, m.system_properties.queue_id = topic, b"x", mid, qid
        got = call("SendMessage", send, proto.SendMessageResponse)
        assert got.status.code == proto.code("BAD_REQUEST") and "queue 7" in got.status.message
        m = send.messages[1]
        m.system_properties.queue_id = 0
        m.user_properties["KEYS"] = "reserved"
        assert call("SendMessage", send, proto.SendMessageResponse).status.code == proto.code("ILLEGAL_MESSAGE_PROPERTY_KEY")
        raw = Raw(app.cfg.grpcListenPort)

        def received(group: str, topic: str, **kw) -> list[int]:
            return [r.status.code for r in raw.receive(group, topic, **kw) if r.HasField("status")]
        assert received("", "Grpc5Bad") == [proto.code("ILLEGAL_CONSUMER_GROUP")]
        assert received("g", "NoSuchTopic") == [proto.code("TOPIC_NOT_FOUND")]
        assert received("NoSuchGroup", "Grpc5Bad") == [proto.code("CONSUMER_GROUP_NOT_FOUND")]   # (groups are not made on demand here)
        assert received("g", "Grpc5Bad", invisible_ms=500) == [proto.code("ILLEGAL_INVISIBLE_TIME")]
        assert received("g", "Grpc5Bad", sql="a >") == [proto.code("ILLEGAL_FILTER_EXPRESSION")]
        assert received("g", "Grpc5Bad") == [proto.code("MESSAGE_NOT_FOUND")]       # (nothing was stored)
        got = raw.ack("g", "Grpc5Bad", "not-a-handle", "rbx1.0.0.abc")            # made up; of a message never received
        assert got.status.code == proto.code("MULTIPLE_RESULTS")
        assert [e.status.code for e in got.entries] == [proto.code("INVALID_RECEIPT_HANDLE")] * 2
        assert raw.change("g", "Grpc5Bad", "rbx1.0.0.abc", 5000).status.code == proto.code("INVALID_RECEIPT_HANDLE")
        raw.close()
    finally:
        channel.close()
    asyncio.run(dispatched(app))
    w = Wire("127.0.0.1", app.cfg.listenPort)
    try:
        assert message.decode_records(pull(w, "Grpc5Bad", 0).body) == []         # a refused request stores none of it
    finally:
        w.close()
    assert app.stop() == 0


@NEEDS_5X
def test_the_5x_transactional_producer_commits_rolls_back_and_answers_the_check_back(appliance_factory):
    """Three 5.x half messages: the committed one is delivered, the rolled-back one never, the one
    left open is checked back over the producer's Telemetry stream and committed by its checker's
    answer; a made-up transaction id is refused."""
    app = appliance_factory(grpc=True, transactionTimeOut=1000, transactionCheckInterval=1000).start()
    create_topic(app, "Grpc5T", 1)
    lines = run_5x("transact.py", f"127.0.0.1:{app.cfg.grpcListenPort}", "Grpc5T", timeout=90)
    sent = {ln.split()[1]: ln.split()[2] for ln in lines if ln.startswith("sent ")}
    assert sorted(sent) == ["commit", "open", "rollback"], lines
    assert [ln.split()[1:] for ln in lines if ln.startswith("checked ")] == [[sent["open"], "COMMIT", "tx-open"]], lines
    deadline, got = time.monotonic() + 10, []
    w = Wire("127.0.0.1", app.cfg.listenPort)
    try:
        while len(got) < 2:
            assert time.monotonic() < deadline, got
            time.sleep(0.2)
            asyncio.run(dispatched(app))
            got = message.decode_records(pull(w, "Grpc5T", 0).body)
        time.sleep(1)
        asyncio.run(dispatched(app))
        got = message.decode_records(pull(w, "Grpc5T", 0).body)
    finally:
        w.close()
    assert sorted((r.body, r.properties["UNIQ_KEY"], r.properties["TAGS"]) for r in got) == sorted(
        [(b"tx-commit", sent["commit"], "TagT"), (b"tx-open", sent["open"], "TagT")])
    raw = Raw(app.cfg.grpcListenPort)
    try:
        for tid in ("nope", "rbxtx1.fffff.0"):         # not one; of no half
            req = raw.proto.EndTransactionRequest(transaction_id=tid, message_id="X",
                                                  resolution=raw.proto.enum("TransactionResolution", "COMMIT"))
            req.topic.name = "Grpc5T"
            assert raw.call("EndTransaction", req, raw.proto.EndTransactionResponse).status.code == \
                raw.proto.code("INVALID_TRANSACTION_ID")
    finally:
        raw.close()
    assert app.stop() == 0


@NEEDS_5X
def test_the_5x_push_consumer_is_assigned_the_queues_and_gets_a_failed_message_again(appliance_factory):
    """QueryAssignment and the push consumer's receives: every message consumed; the one its
    listener failed comes again after the first back-off (the 4.x delay levels: 1 s), attempt 2."""
    app = appliance_factory(grpc=True).start()
    create_topic(app, "Grpc5P", 2)
    w = Wire("127.0.0.1", app.cfg.listenPort)
    try:
        for i in range(6):
            assert send_v2(w, "Grpc5P", b"p-%d" % i, queue=i % 2).code == 0
    finally:
        w.close()
    lines = run_5x("push.py", f"127.0.0.1:{app.cfg.grpcListenPort}", "Grpc5P", "G5P", "6", timeout=90)
    consumed = [tuple(ln.split()[1:]) for ln in lines if ln.startswith("consumed ")]
    assert sorted(consumed) == sorted([(f"p-{i}", "1") for i in range(6)] + [("p-0", "2")]), lines
    assert app.stop() == 0


@NEEDS_5X
@pytest.mark.skipif(javaclient.missing() is not None, reason=str(javaclient.missing()))
def test_the_java_4x_producers_messages_reach_the_5x_consumer(appliance_factory, request, tmp_path):
    """The real Java 4.9.8 producer's sends, received by the 5.x SimpleConsumer: each once, its
    key, its body, and the message id the Java client gave it (its UNIQ_KEY)."""
    app = appliance_factory(grpc=True, namesrv=True).start()
    create_topic(app, "Grpc5J", 2)
    wait_route(app, "Grpc5J")
    out = javaclient.run(request.getfixturevalue("java_classes"), "ClusterProducer", app.namesrv, "Grpc5J", "j", "8",
                         logs=str(tmp_path / "java-logs"))
    assert sorted(out.split()[2::3]) == sorted(f"j-{i}" for i in range(8)), out
    lines = run_5x("consume.py", f"127.0.0.1:{app.cfg.grpcListenPort}", "Grpc5J", "G5J", "*", "8", "drain", timeout=90)
    got = [ln.split() for ln in lines if ln.startswith("got ")]
    assert sorted((g[4], g[5], g[2]) for g in got) == sorted((f"j-{i}", f"j-{i}", "1") for i in range(8)), lines
    asyncio.run(dispatched(app))
    w = Wire("127.0.0.1", app.cfg.listenPort)
    try:
        stored = {r.properties["KEYS"]: r.properties["UNIQ_KEY"] for q in (0, 1)
                  for r in message.decode_records(pull(w, "Grpc5J", 0, queue=q).body)}
    finally:
        w.close()
    assert {g[4]: g[1] for g in got} == stored
    assert app.stop() == 0


@NEEDS_5X
def test_the_official_5x_simple_consumer_receives_acks_redelivers_and_dead_letters(appliance_factory):
    """4.x sends (tags, keys, a property; one of another tag, one with a message group) received by
    the 5.x SimpleConsumer through its tag filter; acked ones never come back; one whose invisible
    time was changed is acked with the new handle; the one never acked comes back once its
    invisible time is over with its attempt counted, and after its last attempt (retryMaxTimes 1:
    two deliveries) it is in %DLQ%<group>, where a 4.x consumer reads it; the group's progress is
    its committed offset."""
    app = appliance_factory(grpc=True, grpcMinInvisibleTimeMs=1000).start()
    create_topic(app, "Grpc5C", 2)
    make_group(app, "G5", retryMaxTimes=1)
    w = Wire("127.0.0.1", app.cfg.listenPort)
    ids = {}
    try:
        for i in range(6):
            props = f"TAGS\x01{'TagB' if i == 5 else 'TagA'}\x02KEYS\x01k{i} j{i}\x02p\x01{i}\x02"
            if i == 4:
                props += "__SHARDINGKEY\x01grp\x02"
            r = send_v2(w, "Grpc5C", b"m-%d" % i, props, queue=i % 2)
            assert r.code == 0, r.remark
            ids[r.ext["msgId"]] = i
        lines = run_5x("consume.py", f"127.0.0.1:{app.cfg.grpcListenPort}", "Grpc5C", "G5", "TagA", "5", timeout=90)
        got = {f[1]: f[2:] for f in (ln.split() for ln in lines if ln.startswith("got "))}
        assert sorted(got) == sorted(m for m, i in ids.items() if i < 5), lines        # TagA's, each once
        for msg_id, (attempt, tag, body, keys, p, group) in got.items():
            i = ids[msg_id]
            assert (attempt, tag, body, keys, p, group) == ("1", "TagA", f"m-{i}", f"j{i},k{i}", str(i),
                                                            "grp" if i == 4 else "-"), lines
        kept = next(ln.split()[1] for ln in lines if ln.startswith("kept "))
        assert [ln.split()[1:] for ln in lines if ln.startswith("again ")] == [[kept, "2"]], lines
        assert "after 0" in lines, lines
        # the kept one's second invisible time is over: the dead-letter queue has it, a copy a 4.x consumer reads
        deadline, dlq = time.monotonic() + 10, []
        while not dlq:
            assert time.monotonic() < deadline, "nothing in %DLQ%G5"
            time.sleep(0.3)
            asyncio.run(dispatched(app))
            r = pull(w, "%DLQ%G5", 0, group="dlq-reader")
            dlq = message.decode_records(r.body) if r.code == 0 else []
        # (these 4.x sends carry no UNIQ_KEY: their message id, 4.x's and 5.x's, is the stored offset's id)
        assert [(d.properties["ORIGIN_MESSAGE_ID"], d.body, d.properties["RETRY_TOPIC"], d.reconsume_times) for d in dlq] == [
            (kept, b"m-%d" % ids[kept], "Grpc5C", 1)]
        # the group's progress: past everything on both queues (the TagB one stepped over, the kept one dead-lettered)
        offsets = {q: w.call(R.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G5", "topic": "Grpc5C", "queueId": str(q)})
                   for q in (0, 1)}
        assert {q: int(r.ext["offset"]) for q, r in offsets.items()} == {0: 3, 1: 3}
    finally:
        w.close()
    assert app.stop() == 0


def test_a_restarted_front_keeps_its_leases_acks_and_attempts(appliance_factory):
    """The SimpleConsumer's state survives the gRPC front's kill -9 (the supervisor starts it again):
    a handle given before it still acks, an acked message never comes back, one whose invisible
    time is over comes back with its attempt counted; its handles from before its invisible time
    was changed, and from before it came back, are expired."""
    app = appliance_factory(grpc=True, grpcMinInvisibleTimeMs=1000).start()
    create_topic(app, "Grpc5R", 1)
    w = Wire("127.0.0.1", app.cfg.listenPort)
    raw = Raw(app.cfg.grpcListenPort)
    ok, proto = raw.proto.code("OK"), raw.proto
    try:
        for i in range(3):
            assert send_v2(w, "Grpc5R", b"r-%d" % i).code == 0
        asyncio.run(dispatched(app))
        msgs = [r.message for r in raw.receive("GR", "Grpc5R", batch=3) if r.HasField("message")]
        assert [(m.body, m.system_properties.delivery_attempt, m.system_properties.queue_offset) for m in msgs] == [
            (b"r-%d" % i, 1, i) for i in range(3)]
        handles = [m.system_properties.receipt_handle for m in msgs]
        assert raw.ack("GR", "Grpc5R", handles[0]).status.code == ok
        changed = raw.change("GR", "Grpc5R", handles[2], 1000)
        assert changed.status.code == ok and changed.receipt_handle != handles[2]
        pid = app.role_pid("grpc")
        os.kill(pid, 9)
        deadline = time.monotonic() + 20
        while True:                                         # the supervisor starts it again
            assert time.monotonic() < deadline, "the gRPC front did not come back"
            time.sleep(0.2)
            try:
                if app.role_pid("grpc") != pid and raw.ack("GR", "Grpc5R", handles[0]).status.code == ok:
                    break
            except Exception:
                pass
        assert raw.ack("GR", "Grpc5R", handles[1]).status.code == ok           # a handle from before the restart
        again = [r.message for r in raw.receive("GR", "Grpc5R", poll_ms=5000) if r.HasField("message")]
        assert [(m.body, m.system_properties.delivery_attempt) for m in again] == [(b"r-2", 2)]
        for stale in (handles[2], changed.receipt_handle):    # before the change; before the second delivery
            expired = raw.ack("GR", "Grpc5R", stale)
            assert (expired.status.code, expired.status.message) == (proto.code("INVALID_RECEIPT_HANDLE"), "receipt handle is expired")
        assert raw.ack("GR", "Grpc5R", again[0].system_properties.receipt_handle).status.code == ok
        assert [r.status.code for r in raw.receive("GR", "Grpc5R", poll_ms=1500) if r.HasField("status")] == [
            proto.code("MESSAGE_NOT_FOUND")]
        deadline = time.monotonic() + 5                     # the group's committed offset: past all three
        while int(w.call(R.QUERY_CONSUMER_OFFSET, {"consumerGroup": "GR", "topic": "Grpc5R", "queueId": "0"}).ext["offset"]) != 3:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        raw.close()
        w.close()
    assert app.stop() == 0


def test_a_fifo_group_gets_a_queue_in_order_one_batch_at_a_time(appliance_factory):
    """A FIFO group (consumeMessageOrderly, as 5.x's group config) takes nothing more from a queue
    while a message of it is invisible, gets that message again (its attempt counted) before any
    after it, and the next once it is acked; a group that is not FIFO takes the next at once."""
    app = appliance_factory(grpc=True, grpcMinInvisibleTimeMs=1000).start()
    create_topic(app, "Grpc5F", 1)
    make_group(app, "GF", consumeMessageOrderly=True)
    w = Wire("127.0.0.1", app.cfg.listenPort)
    raw = Raw(app.cfg.grpcListenPort)
    ok = raw.proto.code("OK")

    def take(group: str, poll_ms: int = 0) -> list:
        return [(r.message.body, r.message.system_properties.delivery_attempt, r.message.system_properties.receipt_handle)
                for r in raw.receive(group, "Grpc5F", batch=1, poll_ms=poll_ms) if r.HasField("message")]
    try:
        for i in range(3):
            assert send_v2(w, "Grpc5F", b"f-%d" % i).code == 0
        asyncio.run(dispatched(app))
        [(body, attempt, handle)] = take("GF")
        assert (body, attempt) == (b"f-0", 1)
        assert take("GF") == []                                        # f-0 is invisible: the queue waits
        assert [b for b, _a, _h in take("GN")] == [b"f-0"] and [b for b, _a, _h in take("GN")] == [b"f-1"]   # not FIFO
        assert raw.change("GF", "Grpc5F", handle, 1000).status.code == ok
        [(body, attempt, handle)] = take("GF", poll_ms=5000)           # due again: f-0 first, attempt 2
        assert (body, attempt) == (b"f-0", 2)
        assert raw.ack("GF", "Grpc5F", handle).status.code == ok
        assert [(b, a) for b, a, _h in take("GF")] == [(b"f-1", 1)]
    finally:
        raw.close()
        w.close()
    assert app.stop() == 0


def test_a_sync_master_send_with_no_slave_is_refused_ha_not_available(appliance_factory):
    """SYNC_MASTER: a 5.x send waits for a slave as a 4.x one does; with none connected it is
    answered HA_NOT_AVAILABLE at once (4.x's SLAVE_NOT_AVAILABLE, as the 5.x proxy maps it)."""
    app = appliance_factory(grpc=True, brokerRole="SYNC_MASTER").start()
    create_topic(app, "Grpc5S", 1)
    raw = Raw(app.cfg.grpcListenPort)
    try:
        send = raw.proto.SendMessageRequest()
        m = send.messages.add()
        m.topic.name, m.body, m.system_properties.message_id = "Grpc5S", b"x", "S1"
        got = raw.call("SendMessage", send, raw.proto.SendMessageResponse)
        assert got.status.code == raw.proto.code("HA_NOT_AVAILABLE"), got
    finally:
        raw.close()
    assert app.stop() == 0
