"""RocketMQ 5.x's consumers against the gRPC front (grpcfront/consume.py): the official Python
client's SimpleConsumer and PushConsumer, and the protocol by hand: receive with invisible time,
ack, change invisible duration, re-delivery with the attempt counted, the dead-letter queue, FIFO
groups in order, the state kept across the front's kill -9, and the Java 4.9.8 producer's messages
received by the 5.x consumer."""
from __future__ import annotations

import asyncio
import os
import time

import pytest

from rocketbox.remoting.codes import RequestCode as R
from rocketbox.shm.layout import S
from rocketbox.store import message
from tests.integration import javaclient
from tests.integration.grpcclient import NEEDS_5X, Raw, make_group, run_5x
from tests.integration.harness import create_topic, dispatched, wait_route
from tests.integration.test_readers import pull, send_v2
from tests.integration.wire import Wire


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
    create_topic(app, "Grpc5R", 2)
    w = Wire("127.0.0.1", app.cfg.listenPort)
    raw = Raw(app.cfg.grpcListenPort)
    ok, proto = raw.proto.code("OK"), raw.proto
    try:
        for i in range(3):
            assert send_v2(w, "Grpc5R", b"r-%d" % i, queue=1).code == 0
        asyncio.run(dispatched(app))
        # (the request names queue 0: as the 5.x proxy, the front takes it as naming the broker, and reads any queue)
        msgs = [r.message for r in raw.receive("GR", "Grpc5R", batch=3, queue=0) if r.HasField("message")]
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
        assert [r.status.code for r in raw.receive("GR", "Grpc5R", poll_ms=500) if r.HasField("status")] == [
            proto.code("MESSAGE_NOT_FOUND")]
        deadline = time.monotonic() + 5                     # the group's committed offset: past all three
        while int(w.call(R.QUERY_CONSUMER_OFFSET, {"consumerGroup": "GR", "topic": "Grpc5R", "queueId": "1"}).ext["offset"]) != 3:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        raw.close()
        w.close()
    assert app.stop() == 0


def test_a_fifo_group_gets_a_queue_in_order_one_batch_at_a_time(appliance_factory):
    """A FIFO group (consumeMessageOrderly, as 5.x's group config) takes nothing more from a queue
    while a message of it is invisible, gets that message again (its attempt counted) before any
    after it, and the next once it is acked; a group that is not FIFO takes the next at once. One
    forwarded to the dead-letter queue by its consumer is there, and gone from the group."""
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
        [(body, attempt, handle)] = take("GF")
        assert (body, attempt) == (b"f-1", 1)
        forward = raw.proto.ForwardMessageToDeadLetterQueueRequest(receipt_handle=handle, message_id="X", delivery_attempt=1,
                                                                   max_delivery_attempts=17)
        forward.group.name, forward.topic.name = "GF", "Grpc5F"          # (a push consumer giving a FIFO message up)
        assert raw.call("ForwardMessageToDeadLetterQueue", forward,
                        raw.proto.ForwardMessageToDeadLetterQueueResponse).status.code == ok
        assert [(b, a) for b, a, _h in take("GF")] == [(b"f-2", 1)]     # f-1 is gone from the group: acked
        sh = app.shared()
        try:                        # six deliveries, counted where the metrics' messages out are
            assert int(sh.slots[:, S.PULLED_MSGS].sum()) == 6 and int(sh.slots[:, S.PULLED_BYTES].sum()) == 6 * 3
        finally:
            sh.close()
        asyncio.run(dispatched(app))
        assert [r.body for r in message.decode_records(pull(w, "%DLQ%GF", 0, group="dlq-reader").body)] == [b"f-1"]
    finally:
        raw.close()
        w.close()
    assert app.stop() == 0
