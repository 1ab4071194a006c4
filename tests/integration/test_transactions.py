"""Transactional half messages are refused until transactions are served: NO_PERMISSION with the
remark of Java's ``rejectTransactionMessage`` (broker:processor/SendMessageProcessor.java), for our
client, a raw batch and the real Java 4.9.8 TransactionMQProducer, and nothing is stored."""
from __future__ import annotations

import asyncio

import pytest

from rocketbox.client.errors import MQBrokerError
from rocketbox.client.message import Message
from rocketbox.client.producer import Producer
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.store import message
from tests.integration import javaclient
from tests.integration.harness import create_topic, read_topic, wait_route
from tests.integration.test_readers import send_ext
from tests.integration.wire import Wire

REMARK = "the broker[127.0.0.1] sending transaction message is forbidden"      # brokerIP1, as Java's


def _max_offsets(app, topic: str, queues: int) -> list[int]:
    w = Wire("127.0.0.1", app.cfg.listenPort)
    try:
        return [int(w.call(R.GET_MAX_OFFSET, {"topic": topic, "queueId": str(q)}).ext["offset"]) for q in range(queues)]
    finally:
        w.close()


def test_half_messages_are_refused_with_no_permission_and_never_stored(appliance_factory, java_classes, tmp_path):
    app = appliance_factory(namesrv=True).start()
    create_topic(app, "Tx", 4)
    wait_route(app, "Tx")

    async def ours():
        async with Producer("tx-py", app.namesrv) as p:
            for value in ("true", "TRUE"):              # Boolean.parseBoolean
                with pytest.raises(MQBrokerError) as e:
                    await p.send(Message("Tx", b"half", properties={"TRAN_MSG": value, "PGROUP": "tx-py"}))
                assert (e.value.code, e.value.remark) == (RC.NO_PERMISSION, REMARK)
            with pytest.raises(MQBrokerError) as e:     # one half message among normal ones in a batch
                await p.send_batch([Message("Tx", b"a"), Message("Tx", b"b", properties={"TRAN_MSG": "true"})])
            assert (e.value.code, e.value.remark) == (RC.NO_PERMISSION, REMARK)
            await p.send_oneway(Message("Tx", b"oneway half", properties={"TRAN_MSG": "true"}))
    asyncio.run(ours())

    w = Wire("127.0.0.1", app.cfg.listenPort)           # the batch request's own properties
    r = w.call(R.SEND_BATCH_MESSAGE, send_ext("Tx", "TRAN_MSG\x01true\x02", m="true"),
               message.encode_client_batch([(0, b"x", "")]))
    assert (r.code, r.remark) == (RC.NO_PERMISSION, REMARK)
    w.close()

    out = javaclient.run(java_classes, "TxProducer", app.namesrv, "Tx", logs=str(tmp_path / "java-logs"))
    lines = out.splitlines()                             # the exception's cause chain, then the callback's count
    assert lines[0].startswith("exception=MQClientException code=-1 message=send message Exception"), out
    assert lines[1].startswith("exception=MQClientException code=16 message=Send [3] times, still failed"), out
    assert lines[2:] == [f"exception=MQBrokerException code=16 message={REMARK}",
                         "executed=0 checked=0"], out      # the local transaction never ran

    assert _max_offsets(app, "Tx", 4) == [0, 0, 0, 0]

    async def normal():
        async with Producer("tx-py", app.namesrv) as p:
            return await p.send(Message("Tx", b"normal", properties={"TRAN_MSG": "false"}))
    sent = asyncio.run(normal())
    assert (sent.status, sent.queue_offset) == ("SEND_OK", 0)
    got = asyncio.run(read_topic(app, "Tx"))
    assert [(m.body, m.queue_offset, m.commit_log_offset) for m in got] == [(b"normal", 0, 0)]   # nothing before it
