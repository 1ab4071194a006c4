"""A real client written elsewhere: RocketMQ's C++ client (PyPI ``rocketmq==0.4.4``) sends sync,
oneway and batch, and consumes with its push and pull consumers, against a whole appliance.  Each
scenario runs in its own process (``cppclient.py``); the store is read back with our own client."""
from __future__ import annotations

import asyncio
import collections
import json
import os
import subprocess
import sys
import time

from rocketbox.client.message import Message
from rocketbox.client.producer import Producer
from tests.integration.harness import ROOT, read_topic

DRIVER = os.path.join(ROOT, "tests", "integration", "cppclient.py")


def cpp_start(home, **args) -> subprocess.Popen:
    """Start one C++ client scenario; its logs go under ``home/logs`` (the library writes to $HOME)."""
    os.makedirs(home, exist_ok=True)
    return subprocess.Popen([sys.executable, DRIVER, json.dumps(args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "HOME": str(home)}, cwd=ROOT)


def cpp_result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, f"C++ client {proc.args[-1][:40]} failed ({proc.returncode}): {err[-2000:]}"
    return json.loads(out.strip().splitlines()[-1])


def cpp(tmp_path, **args) -> dict:
    """Run one C++ client scenario to its end."""
    return cpp_result(cpp_start(tmp_path, **args))


async def produce(app, topic: str, bodies: list[str]) -> None:
    p = await Producer("py-producers", app.namesrv).start()
    for i, b in enumerate(bodies):
        assert (await p.send(Message(topic, b.encode(), tags=f"Tag{'ABC'[i % 3]}", keys=b))).status == "SEND_OK"
    await p.shutdown()


def test_cpp_producer_sync_oneway_and_batch_are_stored_once_each(appliance_factory, tmp_path):
    app = appliance_factory(namesrv=True).start()
    res = cpp(tmp_path, do="produce", namesrv=app.namesrv, topic="CppSend", sync=20, oneway=10, batch=16)
    assert [r["status"] for r in res["sync"]] == ["OK"] * 20          # the C++ client names SEND_OK "OK"
    assert res["batch"]["status"] == "OK"
    want = {f"sync-{i}" for i in range(20)} | {f"oneway-{i}" for i in range(10)} | {f"batch-{i}" for i in range(16)}

    msgs: list = []
    deadline = time.monotonic() + 10               # oneway sends are not acknowledged: wait for them
    while time.monotonic() < deadline:
        msgs = asyncio.run(read_topic(app, "CppSend"))
        if {m.body.decode() for m in msgs} >= want:
            break
        time.sleep(0.2)
    count = collections.Counter(m.body.decode() for m in msgs)
    assert set(count) == want and set(count.values()) == {1}, count
    by_body = {m.body.decode(): m for m in msgs}
    for kind, tag, key in (("sync", "TagA", "sk"), ("oneway", "TagB", "ok"), ("batch", "TagC", "bk")):
        for body, m in by_body.items():
            if body.startswith(kind):
                assert (m.tags, m.keys) == (tag, [key + body.split("-")[1]]), (body, m.tags, m.keys)
    # a sync send's result names the stored record: its unique id and its queue offset
    by_id = {m.msg_id: m for m in msgs}
    for i, r in enumerate(res["sync"]):
        m = by_id[r["msg_id"]]
        assert (m.body.decode(), m.queue_offset) == (f"sync-{i}", r["offset"])
    # the batch went to one queue, in order, at consecutive offsets starting at its result's offset
    batch = sorted((m for m in msgs if m.body.startswith(b"batch")), key=lambda m: m.queue_offset)
    assert len({m.queue_id for m in batch}) == 1
    assert [m.body.decode() for m in batch] == [f"batch-{i}" for i in range(16)]
    assert [m.queue_offset for m in batch] == list(range(res["batch"]["offset"], res["batch"]["offset"] + 16))


def test_cpp_producer_delay_level_holds_its_messages_for_the_levels_delay(appliance_factory, tmp_path):
    """The C++ client's setDelayTimeLevel: level 2 (2 s here) arrives 2 s after its send, not before."""
    app = appliance_factory(namesrv=True, messageDelayLevel="1s 2s").start()
    sent_at = time.time()
    res = cpp(tmp_path, do="produce", namesrv=app.namesrv, topic="CppDelay", sync=5, oneway=0, batch=0, delay=2)
    assert [r["status"] for r in res["sync"]] == ["OK"] * 5
    assert time.time() - sent_at > 2.0 or not asyncio.run(read_topic(app, "CppDelay"))     # none before its time
    msgs: list = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(msgs) < 5:
        msgs = asyncio.run(read_topic(app, "CppDelay"))
        time.sleep(0.2)
    assert sorted(m.body.decode() for m in msgs) == [f"sync-{i}" for i in range(5)]
    assert all(m.properties["DELAY"] == "2" and m.store_timestamp - m.born_timestamp >= 1990 for m in msgs), msgs
    assert app.stop() == 0


def test_cpp_push_consumer_filters_by_tag_and_resumes_and_pull_consumer_reads_all(appliance_factory, tmp_path):
    app = appliance_factory(namesrv=True).start()
    first = [f"m{i}" for i in range(30)]
    asyncio.run(produce(app, "CppRead", first))                    # tags TagA, TagB, TagC in turn
    wanted = [b for i, b in enumerate(first) if i % 3 != 1]        # TagA || TagC

    run1 = cpp(tmp_path, do="push", namesrv=app.namesrv, topic="CppRead", group="cpp-push",
               expr="TagA || TagC", expect=len(wanted), seconds=30, linger=1)["seen"]
    assert sorted(m["body"] for m in run1) == sorted(wanted)       # each once, none of TagB
    assert {m["tags"] for m in run1} == {"TagA", "TagC"}
    assert all(m["keys"] == m["body"] for m in run1)

    # the group committed its offsets on shutdown: a new consumer of the group gets only what is new
    more = [f"n{i}" for i in range(30, 36)]
    asyncio.run(produce(app, "CppRead", more))
    run2 = cpp(tmp_path, do="push", namesrv=app.namesrv, topic="CppRead", group="cpp-push",
               expr="TagA || TagC", expect=4, seconds=30, linger=2)["seen"]
    assert sorted(m["body"] for m in run2) == sorted(b for i, b in enumerate(more, 30) if i % 3 != 1)

    # the pull consumer reads every queue from 0: everything, at the offsets the push consumer saw
    pulled = cpp(tmp_path, do="pull", namesrv=app.namesrv, topic="CppRead", group="cpp-pull")["seen"]
    assert sorted(m["body"] for m in pulled) == sorted(first + more)
    where = {m["body"]: (m["queue"], m["offset"]) for m in pulled}
    assert all(where[m["body"]] == (m["queue"], m["offset"]) for m in run1 + run2)
    for q in {m["queue"] for m in pulled}:
        offsets = sorted(m["offset"] for m in pulled if m["queue"] == q)
        assert offsets == list(range(len(offsets)))


def test_cpp_push_consumers_of_one_group_share_the_queues_and_get_each_message_once(appliance_factory, tmp_path):
    """Two C++ push consumers of one group, each its own process (so through either reader): once
    both are members, each owns its own queues (as each says itself when asked for its running
    info) and every message goes to exactly one of them."""
    from rocketbox.client.instance import ClientInstance, MessageQueue
    from rocketbox.remoting.codes import RequestCode as R
    app = appliance_factory(namesrv=True).start()
    asyncio.run(produce(app, "CppShare", ["init"]))
    procs = [cpp_start(tmp_path / name, do="push", namesrv=app.namesrv, topic="CppShare", group="cpp-share",
                       expect=10**6, seconds=20) for name in ("a", "b")]

    async def members() -> int:
        inst = ClientInstance(app.namesrv)
        await inst.start()
        try:
            addr = next(iter((await inst.route("CppShare")).masters.values()))
            resp = await inst.call(addr, R.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "cpp-share"}, ok=(0, 1))
            return len(json.loads(resp.body)["consumerIdList"]) if resp.code == 0 else 0
        finally:
            await inst.stop()

    deadline = time.monotonic() + 15
    while asyncio.run(members()) < 2:
        assert time.monotonic() < deadline, "the two C++ consumers did not both join"
        time.sleep(0.2)
    time.sleep(3)                                      # their rebalances on NOTIFY_CONSUMER_IDS_CHANGED

    async def connection():
        from rocketbox.client.admin import Admin
        async with Admin(app.namesrv) as admin:
            cc = await admin.consumer_connection("cpp-share")
            return cc, [await admin.consumer_running_info("cpp-share", c.client_id) for c in cc.connections]

    cc, infos = asyncio.run(connection())              # what mqadmin consumerConnection and consumerStatus show
    assert [c.language for c in cc.connections] == ["CPP", "CPP"] and cc.subscriptions["CppShare"] == "*"
    assert (cc.consume_type, cc.message_model) == ("CONSUME_PASSIVELY", "CLUSTERING")   # sent as ordinals
    # each member's own account (GET_CONSUMER_RUNNING_INFO, put to it by the reader holding its connection)
    assert [i.properties["PROP_CONSUME_TYPE"] for i in infos] == ["CONSUME_PASSIVELY"] * 2
    assert all(("CppShare", "*") in {(s["topic"], s["subString"]) for s in i.subscriptions} for i in infos)
    qa, qb = ({q for q in i.queues if q.topic == "CppShare"} for i in infos)
    assert qa | qb == {MessageQueue("CppShare", "b1", q) for q in range(4)} and not qa & qb, (qa, qb)
    # the group's retry topic, which the C++ client subscribes to as Java's does, once its route is
    # known (the broker registers it with the name server on its next pass): one member's at most
    retry = [q for i in infos for q in i.queues if q.topic != "CppShare"]
    assert set(retry) <= {MessageQueue("%RETRY%cpp-share", "b1", 0)} and len(retry) <= 1, retry
    assert sum(int(pq["commitOffset"]) for i in infos for q, pq in i.queues.items() if q.topic == "CppShare") == 1
    sent = [f"s{i}" for i in range(120)]
    asyncio.run(produce(app, "CppShare", sent))
    a, b = (cpp_result(p)["seen"] for p in procs)
    got = collections.Counter(m["body"] for m in a + b)
    assert all(got[x] == 1 for x in sent), {x: got[x] for x in sent if got[x] != 1}
    qa = {m["queue"] for m in a if m["body"] in sent}
    qb = {m["queue"] for m in b if m["body"] in sent}
    assert qa and qb and not qa & qb, (qa, qb)          # each its own queues


def test_cpp_orderly_push_consumer_locks_its_queues_and_gets_each_queue_in_order(appliance_factory, tmp_path):
    """The C++ client's orderly push consumer (MessageListenerOrderly) locks each queue with
    LOCK_BATCH_MQ before it consumes it: without the locks it consumed nothing.  Every message
    comes once, each queue's in offset order."""
    app = appliance_factory(namesrv=True).start()
    sent = [f"o{i}" for i in range(40)]
    asyncio.run(produce(app, "CppOrdered", sent))
    seen = cpp(tmp_path, do="push", namesrv=app.namesrv, topic="CppOrdered", group="cpp-ordered", orderly=True,
               expect=len(sent), seconds=30, linger=1)["seen"]
    assert sorted(m["body"] for m in seen) == sorted(sent)
    for q in {m["queue"] for m in seen}:
        offsets = [m["offset"] for m in seen if m["queue"] == q]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), (q, offsets)


def test_cpp_push_consumer_starts_over_when_its_groups_offsets_are_reset(appliance_factory, tmp_path):
    """``appliance reset-offset --cpp`` (``mqadmin resetOffsetByTime -c``): the broker sends the C++
    consumer the offsets at a time in its own list form, and it consumes the messages stored since
    then once more."""
    from rocketbox.client.admin import Admin
    app = appliance_factory(namesrv=True).start()
    asyncio.run(produce(app, "CppReset", ["init"]))
    proc = cpp_start(tmp_path, do="push", namesrv=app.namesrv, topic="CppReset", group="cpp-reset",
                     expect=21, seconds=60)

    async def progress() -> int:
        async with Admin(app.namesrv) as admin:
            try:
                return sum(q.consumer_offset for q in (await admin.consume_progress("cpp-reset", "CppReset")).queues.values())
            except Exception:
                return 0

    deadline = time.monotonic() + 20
    while asyncio.run(progress()) < 1:                 # joined, and "init" consumed and committed
        assert time.monotonic() < deadline, "the C++ consumer did not consume and commit 'init'"
        time.sleep(0.2)
    sent = [f"x{i}" for i in range(10)]

    async def produce_after_a_pause() -> int:
        """-> a time (ms) nearer the first of ``sent``'s store times than "init"'s (a reset to a
        time goes to the message stored nearest to it, as RocketMQ 4.x's)."""
        p = await Producer("py-producers", app.namesrv).start()
        await p.send(Message("CppResetWarmUp", b"route and connection"))
        await asyncio.sleep(1.5)
        before = int(time.time() * 1000)
        for b in sent:
            assert (await p.send(Message("CppReset", b.encode()))).status == "SEND_OK"
        await p.shutdown()
        return before

    before = asyncio.run(produce_after_a_pause())
    while asyncio.run(progress()) < 11:                # consumed and committed (every 5 s)
        assert time.monotonic() < deadline + 20, "the C++ consumer did not commit what it consumed"
        time.sleep(0.2)
    out = app.cmd("reset-offset", "-g", "cpp-reset", "-t", "CppReset", "-s", str(before), "--cpp")
    assert out.returncode == 0, out.stderr
    assert "#brokerName" in out.stdout and len(out.stdout.strip().splitlines()) == 6     # a line per queue
    got = collections.Counter(m["body"] for m in cpp_result(proc)["seen"])
    assert got == {"init": 1, **{x: 2 for x in sent}}, (got, out.stdout)
