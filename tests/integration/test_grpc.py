"""RocketMQ 5.x's official Python client (``rocketmq-python-client``, run from ``<venv>/rocketmq5``
as its own process: its package name is the 4.x C++ client's too) against the gRPC front
(grpcfront/): its producer starts (routes, telemetry settings), sends normal, FIFO and delay
messages; what it sent is stored as 4.x records that 4.x consumers, the Java 4.9.8 client among
them, read (tags, keys, the client's message id as UNIQ_KEY, user properties, the message group as
__SHARDINGKEY, in queue order), a delay message once its time is up; a delivery time past the
timers' horizon and an unknown topic are refused and nothing of them is stored."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest

from rocketbox.grpcfront import v2
from rocketbox.store import message
from tests.integration import javaclient
from tests.integration.harness import ROOT, create_topic, dispatched, wait_route
from tests.integration.test_readers import pull
from tests.integration.wire import Wire

PROTOCOL_DIR = v2.default_dir()


def run_5x(script: str, *args: str, timeout: float = 60) -> list[str]:
    env = dict(os.environ, PYTHONPATH=PROTOCOL_DIR)
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "integration", "grpc5", script), *args],
                       env=env, capture_output=True, text=True, timeout=timeout, cwd="/tmp")
    assert p.returncode == 0, p.stdout + p.stderr[-4000:]
    return p.stdout.splitlines()


@pytest.mark.skipif(not os.path.isdir(os.path.join(PROTOCOL_DIR, "rocketmq", "v5")),
                    reason="rocketmq-python-client is not installed in <venv>/rocketmq5: ./install.sh installs it")
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
    proto = v2.load()
    app = appliance_factory(grpc=True).start()
    create_topic(app, "Grpc5Bad", 1)
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
        receive = channel.unary_stream(f"/{v2.SERVICE}/ReceiveMessage", request_serializer=lambda r: r.SerializeToString(),
                                       response_deserializer=proto.ReceiveMessageResponse.FromString)
        replies = list(receive(proto.ReceiveMessageRequest(), timeout=10))
        assert [r.status.code for r in replies] == [proto.code("NOT_IMPLEMENTED")]
    finally:
        channel.close()
    asyncio.run(dispatched(app))
    w = Wire("127.0.0.1", app.cfg.listenPort)
    try:
        assert message.decode_records(pull(w, "Grpc5Bad", 0).body) == []         # a refused request stores none of it
    finally:
        w.close()
    assert app.stop() == 0
