"""Request-reply (RocketMQ 4.6+, broker:processor/ReplyMessageProcessor.java): a responder's reply
(SEND_REPLY_MESSAGE_V2) is pushed to the requesting client (PUSH_REPLY_MESSAGE_TO_CLIENT) through
whichever reader holds its connection, and stored in the cluster's reply topic when
``storeReplyMessageEnable`` says so; with the Java 4.9.8 client, ours, and on the wire."""
from __future__ import annotations

import asyncio
import json
import statistics
import threading
import time

from rocketbox import Message, MessageExt, Producer, PushConsumer, create_reply
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from tests.integration import javaclient
from tests.integration.harness import create_topic, wait_route
from tests.integration.test_readers import send_ext
from tests.integration.wire import Wire


def test_the_java_client_gets_each_reply_within_100_ms(appliance_factory, java_classes, tmp_path):
    app = appliance_factory(namesrv=True).start()
    create_topic(app, "Rpc", 4)
    wait_route(app, "Rpc")
    out = javaclient.run(java_classes, "RequestReply", app.namesrv, "Rpc", "20", logs=str(tmp_path / "java-logs"))
    replies = [ln for ln in out.splitlines() if ln.startswith("reply=")]
    assert [ln.split()[0] for ln in replies] == [f"reply=re:q{i}" for i in range(20)], out
    ms = [float(ln.split("ms=")[1]) for ln in replies]
    assert statistics.median(ms) < 100, ms


def test_the_python_client_requests_and_replies(appliance_factory):
    app = appliance_factory(namesrv=True).start()
    create_topic(app, "RpcPy", 2)
    wait_route(app, "RpcPy")

    async def go():
        async with Producer("rpc-responder", app.namesrv) as responder:
            async def answer(msgs: list[MessageExt]) -> bool:
                for m in msgs:
                    await responder.send(create_reply(m, b"re:" + m.body))
                return True
            consumer = PushConsumer("rpc-consumer", app.namesrv)
            await consumer.subscribe("RpcPy").register(answer).start()
            await asyncio.sleep(2)                         # its rebalance takes the queues
            async with Producer("rpc-requester", app.namesrv) as requester:
                got = []
                for i in range(10):
                    began = time.monotonic()
                    reply = await requester.request(Message("RpcPy", b"q%d" % i), timeout_s=3)
                    got.append((reply.body, reply.properties["MSG_TYPE"], time.monotonic() - began))
            await consumer.shutdown()
            return got
    got = asyncio.run(go())
    assert [(b, t) for b, t, _s in got] == [(b"re:q%d" % i, "reply") for i in range(10)]
    assert statistics.median(s for _b, _t, s in got) < 0.1, got


def test_a_reply_reaches_a_requester_on_the_other_reader_and_one_whose_requester_left_is_refused(appliance_factory):
    app = appliance_factory(storeReplyMessageEnable="false").start()
    requester = Wire("127.0.0.1", app.cfg.reader_port(0))
    responder = Wire("127.0.0.1", app.cfg.reader_port(1))
    try:
        hb = requester.call(R.HEART_BEAT, {}, json.dumps({"clientID": "req-1", "consumerDataSet": [],
                                                          "producerDataSet": [{"groupName": "rpc-req"}]}).encode())
        assert hb.code == RC.SUCCESS
        time.sleep(0.3)                                    # (reader 0 publishes its clients at its turn's end)
        props = "CORRELATION_ID\x01c-1\x02REPLY_TO_CLIENT\x01req-1\x02TTL\x013000\x02MSG_TYPE\x01reply\x02"
        pushed = {}

        def take_push():
            req = requester.read_request()
            pushed["req"] = req
            requester.answer(req)
        t = threading.Thread(target=take_push)
        t.start()
        r = responder.call(R.SEND_REPLY_MESSAGE_V2, send_ext("DefaultCluster_REPLY_TOPIC", props), b"the answer")
        t.join(5)
        assert r.code == RC.SUCCESS, r.remark
        req = pushed["req"]
        assert (req.code, req.body, req.ext["topic"]) == (R.PUSH_REPLY_MESSAGE_TO_CLIENT, b"the answer",
                                                           "DefaultCluster_REPLY_TOPIC")
        assert "CORRELATION_ID\x01c-1" in req.ext["properties"] and req.ext["storeHost"].endswith(f":{app.cfg.listenPort}")
        gone = props.replace("req-1", "req-gone")
        r = responder.call(R.SEND_REPLY_MESSAGE_V2, send_ext("DefaultCluster_REPLY_TOPIC", gone), b"nobody")
        assert (r.code, r.remark) == (RC.SYSTEM_ERROR, "push reply message fail, channel of <req-gone> not found.")
    finally:
        requester.close()
        responder.close()
