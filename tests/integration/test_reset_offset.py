"""Resetting a consumer group's offsets to a time (``mqadmin resetOffsetByTime``):
INVOKE_BROKER_TO_RESET_OFFSET works out each queue's offset at the time and sends it to every
member of the group (RESET_CONSUMER_CLIENT_OFFSET), whichever reader holds it; our push consumers
start over from it; with no member online the admin commits the offsets itself."""
from __future__ import annotations

import asyncio
import json
import re
import time

from rocketbox.client.admin import Admin
from rocketbox.client.consumer import PushConsumer
from rocketbox.client.instance import MessageQueue
from rocketbox.client.message import Message
from rocketbox.client.producer import Producer
from rocketbox.remoting import mqtable
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from tests.integration.harness import create_topic, dispatched, owned
from tests.integration.test_admin import _heartbeat, _wait_for
from tests.integration.wire import Wire

TOPIC, GROUP = "Rewind", "rewind_group"


def _keys(msgs) -> set:
    """Which stored messages these are: (queue, offset) each, however often delivered."""
    return {(m.queue_id, m.queue_offset) for m in msgs}


async def _send(app, rounds: list[int]) -> list[int]:
    """``rounds[i]`` messages to each of the topic's queues, a pause before each round: -> the
    time (ms) each round began, nearer the store time of its first message than of any before
    (the offset at a time is that of the message stored nearest to it, as RocketMQ 4.x's)."""
    began = []
    async with Producer("rewind_producer", app.namesrv) as p:
        for r, n in enumerate(rounds):
            await asyncio.sleep(0.3)
            began.append(int(time.time() * 1000))
            for i in range(n):
                for q in range(2):
                    await p.send(Message(TOPIC, b"r%d-%d" % (r, i)), queue=MessageQueue(TOPIC, "b1", q))
    await dispatched(app)
    return began


def _commit(w: Wire, group: str, qid: int, offset: int) -> None:
    assert w.call(R.UPDATE_CONSUMER_OFFSET, {"consumerGroup": group, "topic": TOPIC, "queueId": str(qid),
                                             "commitOffset": str(offset)}).code == RC.SUCCESS


def _reset(w: Wire, group: str, timestamp: int, force: bool = True, **kw):
    return w.call(R.INVOKE_BROKER_TO_RESET_OFFSET, {"topic": TOPIC, "group": group, "timestamp": str(timestamp),
                                                    "isForce": str(force).lower()}, **kw)


def _told(w: Wire):
    """The next RESET_CONSUMER_CLIENT_OFFSET put to the client on ``w`` (other pushes skipped)."""
    while (req := w.read_request()).code != R.RESET_CONSUMER_CLIENT_OFFSET:
        pass
    return req


def test_the_broker_tells_every_member_on_every_reader_the_offsets_at_a_time(appliance_factory):
    """Members on both readers are each sent the table the admin gets back, in Java's form (the
    C++ clients' list form when the admin speaks CPP); the offset at a time is the first message
    stored after it, "now" (-1) is each queue's end, and without force a queue only moves back.
    Bad requests get Java's codes and remarks."""
    app = appliance_factory(namesrv=True).start()
    create_topic(app, TOPIC, 2)
    began = asyncio.run(_send(app, [3, 4]))          # each queue: offsets 0-2, then 3-6
    r0, r1 = (Wire("127.0.0.1", app.cfg.reader_port(i)) for i in (0, 1))
    a, b = Wire("127.0.0.1", app.cfg.reader_port(0)), Wire("127.0.0.1", app.cfg.reader_port(1))
    group = [{"groupName": "g", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
              "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "subscriptionDataSet": []}]
    resp = _reset(r0, "g", began[1])
    assert (resp.code, resp.remark) == (RC.SYSTEM_ERROR, "THe consumer group <g> not exist")   # (Java's words)
    _commit(r0, "g", 0, 6)
    _commit(r0, "g", 1, 2)
    resp = _reset(r1, "g", began[1])
    assert (resp.code, resp.remark) == (RC.CONSUMER_NOT_ONLINE, "Consumer not online, so can not reset offset, "
                                                                f"Group: g Topic: {TOPIC} Timestamp: {began[1]}")
    _heartbeat(a, "10.0.0.1@a", group, [], language="JAVA", version=399)
    _heartbeat(b, "10.0.0.2@b", group, [], language="CPP", version=63)
    assert _wait_for(lambda: len(json.loads(r1.call(R.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "g"}).body)
                                 ["connectionSet"]) == 2)
    for w, when, force, want in ((r0, began[1], True, {0: 3, 1: 3}),       # the second round's first messages
                                 (r1, began[0], False, {0: 0, 1: 0}),      # back: moves without force too
                                 (r0, -1, False, {0: 6, 1: 2}),            # "now" is on: not without force...
                                 (r1, -1, True, {0: 7, 1: 7})):            # ...and each queue's end with it
        resp = _reset(w, "g", when, force)
        assert resp.code == RC.SUCCESS, resp.remark
        assert mqtable.decode(resp.body, "offsetTable") == ({}, {(TOPIC, "b1", q): o for q, o in want.items()})
        for member in (a, b):
            req = _told(member)
            assert req.is_oneway and req.language == "JAVA" and req.body == resp.body
            assert req.ext == {"topic": TOPIC, "group": "g", "timestamp": str(when), "isForce": "false"}
    resp = _reset(r0, "g", began[0], language="CPP")             # mqadmin -c: the members get the list form
    assert mqtable.decode(resp.body, "offsetTable")[1] == {(TOPIC, "b1", 0): 0, (TOPIC, "b1", 1): 0}
    for member in (a, b):
        assert json.loads(_told(member).body) == {"offsetTable": [
            {"brokerName": "b1", "offset": 0, "queueId": q, "topic": TOPIC} for q in (0, 1)]}
    # the broker moved no committed offset: the members do
    assert r0.call(R.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": TOPIC, "queueId": "1"}).ext["offset"] == "2"
    # a member too old to reset: nobody is told
    old = Wire("127.0.0.1", app.cfg.reader_port(1))
    _heartbeat(old, "10.0.0.3@old", group, [], language="JAVA", version=27)      # V3_0_6
    assert _wait_for(lambda: len(json.loads(r0.call(R.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "g"}).body)
                                 ["connectionSet"]) == 3)
    for w in (r0, r1):
        resp = _reset(w, "g", began[0])
        assert (resp.code, resp.remark) == (RC.SYSTEM_ERROR, "the client does not support this feature. version=27")
    resp = r0.call(R.INVOKE_BROKER_TO_RESET_OFFSET, {"topic": "NoSuchTopic", "group": "g", "timestamp": "0",
                                                     "isForce": "true"})
    assert (resp.code, resp.remark) == \
        (RC.SYSTEM_ERROR, "[reset-offset] reset offset failed, no topic in this broker. topic=NoSuchTopic")
    resp = r0.call(R.INVOKE_BROKER_TO_RESET_OFFSET, {"topic": TOPIC, "group": "g", "timestamp": "0"})
    assert resp.code == RC.SYSTEM_ERROR and "isForce" in resp.remark
    # a client cannot have a reader pass a reset on: that is the readers' own
    resp = r0.call(R.RESET_CONSUMER_CLIENT_OFFSET, {"topic": TOPIC, "group": "g", "timestamp": "0", "isForce": "false"})
    assert (resp.code, resp.remark) == (RC.REQUEST_CODE_NOT_SUPPORTED, f" request type {R.RESET_CONSUMER_CLIENT_OFFSET} "
                                                                       "not supported")


def test_real_consumers_start_over_from_a_time_and_an_offline_group_is_committed(appliance_factory):
    """``appliance reset-offset`` rewinds a group of two push consumers, each owning one queue, to
    a time: they consume the messages stored since then again and commit on from there; with the
    group stopped, the reset commits the offsets itself (Java's fallback), and the next member
    starts from them."""
    app = appliance_factory(namesrv=True).start()
    create_topic(app, TOPIC, 2)

    async def run():
        got: list = []
        began = await _send(app, [3, 4])
        consumers = [PushConsumer(GROUP, app.namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET") for _ in range(2)]
        for c in consumers:
            await c.subscribe(TOPIC).register(lambda msgs: got.extend(msgs) or True).start()
        try:
            deadline = time.monotonic() + 30
            while len(got) < 14 or sorted(len(owned(c)) for c in consumers) != [1, 1]:
                assert time.monotonic() < deadline, (len(got), [owned(c) for c in consumers])
                await asyncio.sleep(0.05)
            n = len(got)         # (a queue that moved while the group settled may have been read twice)
            first = [m.body for m in got]
            out = await asyncio.to_thread(app.cmd, "reset-offset", "-g", GROUP, "-t", TOPIC, "-s", str(began[1]))
            while len(_keys(got[n:])) < 8:             # the second round's 4 per queue, again
                assert time.monotonic() < deadline + 30, len(got)
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)
            again = got[n:]
        finally:
            for c in consumers:
                await c.shutdown()
        async with Admin(app.namesrv) as admin:
            committed = {mq.queue_id: q.consumer_offset for mq, q in (await admin.consume_progress(GROUP, TOPIC)).queues.items()}
            offline = await admin.reset_offsets(GROUP, TOPIC, began[0] - 1000)
            after = {mq.queue_id: q.consumer_offset for mq, q in (await admin.consume_progress(GROUP, TOPIC)).queues.items()}
        late: list = []
        c = PushConsumer(GROUP, app.namesrv)
        await c.subscribe(TOPIC).register(lambda msgs: late.extend(msgs) or True).start()
        try:
            deadline = time.monotonic() + 30
            while len(late) < 14:
                assert time.monotonic() < deadline, len(late)
                await asyncio.sleep(0.05)
        finally:
            await c.shutdown()
        return first, out, again, committed, offline, after, late

    first, out, again, committed, offline, after, late = asyncio.run(run())
    assert sorted(set(first)) == sorted({b"r0-%d" % i for i in range(3)} | {b"r1-%d" % i for i in range(4)})
    assert out.returncode == 0, out.stderr
    assert re.search(r"^b1\s+0\s+3$", out.stdout, re.M) and re.search(r"^b1\s+1\s+3$", out.stdout, re.M), out.stdout
    assert _keys(again) == {(q, o) for q in (0, 1) for o in range(3, 7)}          # once more, nothing else
    assert committed == {0: 7, 1: 7}
    assert offline == {MessageQueue(TOPIC, "b1", q): 0 for q in (0, 1)} and after == {0: 0, 1: 0}
    assert _keys(late) == {(q, o) for q in (0, 1) for o in range(7)}
