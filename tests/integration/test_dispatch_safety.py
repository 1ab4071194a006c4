"""No message stops dispatch (#49): a batch whose last message has a property value with a space
(and no KEYS on any) is dispatched and consumed whole, through our client and the real Java 4.9.8
client; a pass the dispatcher cannot build is redone one record at a time, and a record that still
fails is put in its queue without index keys, logged with its offset and counted."""
from __future__ import annotations

import asyncio

import pytest

from rocketbox.client.message import Message
from rocketbox.client.producer import Producer
from rocketbox.shm.layout import C
from tests.integration import javaclient
from tests.integration.harness import read_topic


def test_a_batch_with_a_spaced_property_value_is_dispatched_and_consumed(appliance_factory):
    app = appliance_factory(namesrv=True).start()

    async def go():
        async with Producer("pg", app.namesrv) as p:
            msgs = [Message("Spaced", b"plain-%d" % i) for i in range(99)]
            msgs.append(Message("Spaced", b"noted", properties={"note": "two words"}))
            assert (await p.send_batch(msgs)).status == "SEND_OK"
            for i in range(3):
                assert (await p.send(Message("Spaced", b"after-%d" % i))).status == "SEND_OK"
        return await read_topic(app, "Spaced")

    got = asyncio.run(go())
    assert sorted(m.body for m in got) == sorted([b"plain-%d" % i for i in range(99)] + [b"noted"]
                                                + [b"after-%d" % i for i in range(3)])
    noted = [m for m in got if m.body == b"noted"]
    assert noted[0].properties["note"] == "two words"
    sh = app.shared()
    try:
        assert sh.control[C.DISPATCHED] == sh.control[C.WRITTEN]
        assert (sh.control[C.DISPATCH_UNINDEXED], sh.control[C.DISPATCH_UNQUEUED]) == (0, 0)
    finally:
        sh.close()
    assert "exited with" not in app.log_text()
    status = app.cmd("status")
    assert "0 records dispatched without index keys; 0 records left out of their queue" in status.stdout
    assert app.stop() == 0


@pytest.mark.slow
def test_the_java_client_batch_with_a_spaced_user_property(appliance_factory, java_classes, tmp_path):
    app = appliance_factory(namesrv=True).start()
    out = javaclient.run(java_classes, "BatchProperty", app.namesrv, "JavaSpaced", "100", "20000",
                         logs=str(tmp_path / "java-logs"))
    assert "batch=SEND_OK" in out and out.count("single=SEND_OK") == 3, out
    assert "received=103 note=two words" in out, out
    assert "exited with" not in app.log_text()
    assert app.stop() == 0
