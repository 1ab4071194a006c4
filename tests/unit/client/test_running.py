"""ConsumerRunningInfo (client/running.py): the per-topic rates over the last minute and hour, and
the body in fastjson's form, read back as Java's admin would read it."""
from __future__ import annotations

import json

import pytest

from rocketbox.client import running
from rocketbox.client.instance import MessageQueue
from rocketbox.remoting import mqtable


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_rates_cover_the_last_minute_and_failures_the_last_hour():
    clock = Clock()
    st = running.ConsumeStats(clock)
    st.pulled("T", 32, 10.0)                   # long ago: 2 hours before the asks below
    st.consumed("T", 32, 4.0, ok=False)
    for _ in range(12 * 60):                   # two hours of nothing, marked every 10 s
        clock.t += 10
        st.mark()
    assert len(st.marks) <= 3600 / running.MARK_S + 2      # an hour's snapshots kept, no more
    clock.t += 10
    st.mark()
    st.pulled("T", 30, 20.0)
    st.pulled("T", 0, 40.0)
    st.consumed("T", 20, 6.0, ok=True)
    st.consumed("T", 10, 2.0, ok=False)
    clock.t += 30                              # the rates are over the minute since the mark 60 s ago
    s = st.status("T")
    assert s["pullTPS"] == pytest.approx(30 / 60) and s["pullRT"] == pytest.approx(30.0)
    assert s["consumeOKTPS"] == pytest.approx(20 / 60) and s["consumeFailedTPS"] == pytest.approx(10 / 60)
    assert s["consumeRT"] == pytest.approx(4.0)
    assert s["consumeFailedMsgs"] == 10        # the 32 failed two hours ago are out of the hour
    clock.t += 120                             # two quiet minutes: the minute's rates fall to 0
    st.mark()
    clock.t += 61
    s = st.status("T")
    assert (s["pullTPS"], s["pullRT"], s["consumeOKTPS"], s["consumeRT"]) == (0.0, 0.0, 0.0, 0.0)
    assert s["consumeFailedMsgs"] == 10
    assert st.status("Other") == {"consumeFailedMsgs": 0, "consumeFailedTPS": 0.0, "consumeOKTPS": 0.0,
                                  "consumeRT": 0.0, "pullRT": 0.0, "pullTPS": 0.0}


def test_the_body_is_fastjsons_form_and_reads_back():
    mq = MessageQueue("T", "b1", 3)
    pq = running.ProcessQueue()
    pq.offsets, pq.size, pq.last_consume_ms = [7, 8, 9], 3 << 20, 1
    sub = {"classFilterMode": False, "codeSet": [], "expressionType": "TAG", "subString": "*", "subVersion": 5,
           "tagsSet": [], "topic": "T"}
    body = running.encode({"PROP_CONSUME_TYPE": "CONSUME_PASSIVELY", "PROP_CONSUMEORDERLY": "false"}, [sub],
                          {mq: pq.info(9, False, 0)}, {"T": running.ConsumeStats().status("T")})
    text = body.decode()
    # the queue is an object-literal key, fields in fastjson's (alphabetical) order
    assert '"mqTable":{{"brokerName":"b1","queueId":3,"topic":"T"}:{"cachedMsgCount":3,' in text
    assert text.index('"mqTable"') < text.index('"properties"') < text.index('"statusTable"') \
        < text.index('"subscriptionSet"') and '"jstack"' not in text
    fields, table = mqtable.decode(body, "mqTable")
    assert table[("T", "b1", 3)]["cachedMsgMinOffset"] == 7 and table[("T", "b1", 3)]["cachedMsgSizeInMiB"] == 3
    info = running.decode(body)
    assert info.push and not info.orderly and info.subscriptions == [sub] and info.jstack is None
    assert info.queues == {mq: table[("T", "b1", 3)]}
    assert info.problems("c1", now_ms=61_002) == \
        ["c1 MessageQueue [topic=T, brokerName=b1, queueId=3] can't consume for a while, maybe blocked, 61001ms"]
    assert info.problems("c1", now_ms=60_000) == []
    with pytest.raises(ValueError):
        running.decode(b'{"properties": [1], "mqTable": {}}')
    with pytest.raises(ValueError):
        running.decode(b"not json")
    assert json.loads(running.encode({}, [], {}, {}, jstack="x"))["jstack"] == "x"


def test_stacks_name_the_running_code_and_tasks():
    import asyncio

    async def waiting_task():
        await asyncio.sleep(10)

    async def run():
        task = asyncio.get_running_loop().create_task(waiting_task())
        await asyncio.sleep(0)
        try:
            return running.stacks()
        finally:
            task.cancel()

    assert "test_stacks_name_the_running_code" in running.stacks()
    text = asyncio.run(run())
    assert "Thread" in text and "waiting_task" in text
