"""RocketMQ 5.x's official Python client's producers against the gRPC front (grpcfront/), and the
protocol by hand: normal, FIFO and delay sends stored as 4.x records that 4.x consumers, the Java
4.9.8 client among them, read (tags, keys, the client's message id as UNIQ_KEY, user properties,
the message group as __SHARDINGKEY, in queue order), a delay message once its time is up;
transactions committed, rolled back and checked back; bad requests refused with gRPC's and 5.x's
codes, nothing of them stored; SYNC_MASTER's wait."""
from __future__ import annotations

import asyncio
import time

import pytest

from rocketbox.store import message
from tests.integration import javaclient
from tests.integration.grpcclient import NEEDS_5X, Raw, make_group, run_5x
from tests.integration.harness import create_topic, dispatched, wait_route
from tests.integration.test_readers import pull
from tests.integration.wire import Wire


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


def test_bad_requests_get_grpc_and_5x_codes_and_store_nothing(appliance_factory):
    import grpc
    app = appliance_factory(grpc=True, autoCreateSubscriptionGroup="false").start()
    create_topic(app, "Grpc5Bad", 1)
    make_group(app, "g")
    raw = Raw(app.cfg.grpcListenPort)
    proto, call = raw.proto, raw.call
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
    finally:
        raw.close()
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
