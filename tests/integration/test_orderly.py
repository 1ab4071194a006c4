"""The Python client's orderly push consumer (``PushConsumer(orderly=True)``, Java's
MessageListenerOrderly) against a whole appliance: each queue consumed by one member at a time
under the broker's queue lock, in its order, exactly once through joins and leaves; a queue
another client holds is left alone until it is unlocked; a refused batch blocks its queue."""
from __future__ import annotations

import asyncio
import collections
import json
import time

from rocketbox.client.consumer import PushConsumer
from rocketbox.client.instance import ClientInstance, MessageQueue
from rocketbox.client.message import Message
from rocketbox.remoting.codes import RequestCode as R
from tests.integration.test_clients import make_topic, settled, tally, wait_for


def orderly(app, group: str, topic: str, listener, **kw) -> PushConsumer:
    c = PushConsumer(group, app.namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET", orderly=True, **kw)
    return c.subscribe(topic).register(listener)


async def outsider_lock(instance: ClientInstance, addr: str, group: str, mqs: list[MessageQueue],
                        code: int = R.LOCK_BATCH_MQ) -> list[int]:
    """LOCK_BATCH_MQ (or UNLOCK) as another member of ``group`` would send it; the queue ids it holds."""
    body = json.dumps({"consumerGroup": group, "clientId": "outsider@1",
                       "mqSet": [{"brokerName": q.broker_name, "queueId": q.queue_id, "topic": q.topic} for q in mqs]})
    resp = await instance.call(addr, code, {}, body.encode())
    return sorted(q["queueId"] for q in json.loads(resp.body)["lockOKMQSet"]) if code == R.LOCK_BATCH_MQ else []


def test_orderly_members_consume_each_queue_alone_and_in_order_through_joins_and_leaves(appliance_factory):
    """Eight keys, each sent in sequence to its queue by a selector, while members of an orderly
    group join and leave: every message is consumed exactly once, each key's messages in their
    order, and no two members ever have one queue's batches in their listeners at once (a member
    that gives a queue up finishes its batch and commits before it unlocks; the next one reads the
    offset once it has the lock)."""
    app = appliance_factory(namesrv=True).start()
    calls = []                                   # (member, queue id, bodies, entered, left)

    def member(name: str) -> PushConsumer:
        async def listener(msgs):
            entered = time.monotonic()
            try:
                await asyncio.sleep(0.02)        # a batch takes a while, so an overlap would show
                return True
            finally:                             # (a call cut short by a cancellation counts too)
                calls.append((name, msgs[0].queue_id, [m.body for m in msgs], entered, time.monotonic()))
        return orderly(app, "ordered", "Ordered", listener, pull_batch=4)

    async def run():
        p = await make_topic(app, "Ordered")
        queues = sorted((await p.instance.route("Ordered")).write_queues, key=MessageQueue.sort_key)
        group = {"a": await member("a").start(), "b": await member("b").start()}
        assert await settled(list(group.values()), len(queues))
        sent = []

        async def send():
            for seq in range(60):
                for key in range(8):
                    body = f"{key}:{seq}".encode()
                    assert (await p.send(Message("Ordered", body), queue=queues[key % len(queues)])).status == "SEND_OK"
                    sent.append(body)
                await asyncio.sleep(0.04)

        sender = asyncio.get_running_loop().create_task(send())
        await asyncio.sleep(0.6)
        group["c"] = await member("c").start()
        await asyncio.sleep(0.6)
        await group.pop("a").shutdown()
        await asyncio.sleep(0.6)
        group["d"] = await member("d").start()
        await sender
        assert await settled(list(group.values()), len(queues))
        everything = set(sent) | {b"init"}
        assert await wait_for(lambda: {b for c in calls for b in c[2]} >= everything, timeout=20)
        await asyncio.sleep(0.5)
        for c in group.values():
            await c.shutdown()
        await p.shutdown()
        return sent

    sent = asyncio.run(run())
    seen = collections.Counter(b for c in calls for b in c[2])
    assert len(sent) == 480 and all(n == 1 for n in seen.values()) and set(seen) == set(sent) | {b"init"}, tally(seen)
    by_key = collections.defaultdict(list)
    for _name, _q, bodies, _t0, _t1 in sorted(calls, key=lambda c: c[3]):
        for b in bodies:
            if b != b"init":
                key, seq = b.split(b":")
                by_key[key].append(int(seq))
    assert all(seqs == list(range(60)) for seqs in by_key.values()) and len(by_key) == 8, by_key
    members_of = collections.defaultdict(set)
    for qid in {c[1] for c in calls}:
        spans = sorted((c[3], c[4], c[0]) for c in calls if c[1] == qid)
        members_of[qid] = {s[2] for s in spans}
        overlaps = [(x, y) for x, y in zip(spans, spans[1:]) if y[0] < x[1]]
        assert overlaps == [], (qid, overlaps)
    assert any(len(m) > 1 for m in members_of.values()), members_of     # queues did change hands


def test_a_queue_another_member_holds_waits_for_its_unlock_and_a_refused_batch_blocks_its_queue(appliance_factory):
    """While another client holds a queue's lock, an orderly consumer given that queue consumes
    none of it (and the others as usual); once it is unlocked, the consumer takes it within a
    couple of seconds.  A batch the listener refuses is offered again, and nothing after it in
    its queue comes first.  While the consumer runs, its queues are locked to anyone else; after
    its shutdown they are free."""
    app = appliance_factory(namesrv=True).start()
    order = collections.defaultdict(list)                  # queue id -> bodies as offered
    refusals = collections.Counter()

    def listener(msgs):
        for m in msgs:
            order[m.queue_id].append(m.body)
        if msgs[0].body == b"q1:2" and refusals["q1:2"] < 2:
            refusals["q1:2"] += 1
            return False
        return True

    async def run():
        p = await make_topic(app, "Locked")
        route = await p.instance.route("Locked")
        queues = sorted(route.write_queues, key=MessageQueue.sort_key)
        addr = route.masters[queues[0].broker_name]
        admin = ClientInstance(app.namesrv)
        await admin.start()
        assert await outsider_lock(admin, addr, "locks", [queues[0]]) == [0]
        c = orderly(app, "locks", "Locked", listener, pull_batch=1)
        await c.start()
        assert await settled([c], len(queues))
        for qid, q in enumerate(queues):
            for i in range(5):
                await p.send(Message("Locked", f"q{qid}:{i}".encode()), queue=q)
        others = {f"q{qid}:{i}".encode() for qid in range(1, len(queues)) for i in range(5)}
        assert await wait_for(lambda: others <= {b for bodies in order.values() for b in bodies})
        await asyncio.sleep(1.5)
        assert order[0] == [], order[0]                      # held by the outsider: untouched
        assert await outsider_lock(admin, addr, "locks", queues) == [0]        # the rest are the consumer's
        await outsider_lock(admin, addr, "locks", [queues[0]], R.UNLOCK_BATCH_MQ)
        t0 = time.monotonic()
        assert await wait_for(lambda: len(order[0]) >= 5, timeout=10), order[0]
        took = time.monotonic() - t0
        assert await outsider_lock(admin, addr, "locks", queues) == []         # q0 is the consumer's too now
        await c.shutdown()
        freed = await outsider_lock(admin, addr, "locks", queues)
        await admin.stop()
        await p.shutdown()
        return len(queues), took, freed

    n, took, freed = asyncio.run(run())
    assert took < 3, took
    assert freed == list(range(n))                           # unlocked at shutdown
    assert [b for b in order[0] if b != b"init"] == [f"q0:{i}".encode() for i in range(5)]
    assert [b for b in order[1] if b != b"init"] == [b"q1:0", b"q1:1", b"q1:2", b"q1:2", b"q1:2", b"q1:3", b"q1:4"]
    assert refusals["q1:2"] == 2


def test_a_member_giving_up_a_queue_mid_batch_keeps_its_lock_until_the_batch_is_done(appliance_factory):
    """A queue given up while its batch is in the listener longer than a rebalance waits
    (``DRAIN_S``) stays locked by the member that has it until that batch is done and committed;
    only then does its new owner get the lock and go on from the next message, so the batch is
    neither cut short nor consumed twice."""
    from rocketbox.client.consumer import DRAIN_S
    from rocketbox.client.rebalance import allocate_averagely
    app = appliance_factory(namesrv=True).start()
    calls, entered = [], asyncio.Event()           # (member, body, entered, left)

    def member(name: str, slow_s: float = 0.0) -> PushConsumer:
        async def listener(msgs):
            t0 = time.monotonic()
            if msgs[0].body == b"slow":
                entered.set()
                await asyncio.sleep(slow_s)
            calls.extend((name, m.body, t0, time.monotonic()) for m in msgs)
            return True
        return orderly(app, "handover", "Slow", listener, pull_batch=1)

    async def run():
        p = await make_topic(app, "Slow")
        route = await p.instance.route("Slow")
        queues = sorted(route.write_queues, key=MessageQueue.sort_key)
        a = await member("a", slow_s=DRAIN_S + 2).start()
        assert await settled([a], len(queues))
        b = member("b")
        moving = allocate_averagely(b.instance.client_id, queues, sorted([a.instance.client_id, b.instance.client_id]))[0]
        await p.send(Message("Slow", b"slow"), queue=moving)
        await asyncio.wait_for(entered.wait(), 10)
        await b.start()
        after = [f"after{i}".encode() for i in range(5)]
        for body in after:
            await p.send(Message("Slow", body), queue=moving)
        await asyncio.sleep(DRAIN_S + 0.5)
        assert moving in a.draining and moving not in a.pullers          # given up, its batch still in a's listener
        admin = ClientInstance(app.namesrv)
        await admin.start()
        held = await outsider_lock(admin, route.masters[moving.broker_name], "handover", [moving])
        await admin.stop()
        assert await wait_for(lambda: {c[1] for c in calls} >= set(after), timeout=15)
        await asyncio.sleep(0.5)
        assert moving in b.pullers and not a.draining
        await a.shutdown()
        await b.shutdown()
        await p.shutdown()
        return held

    held = asyncio.run(run())
    assert held == []                                       # a kept it while its batch was in the listener
    on_moving = [c for c in calls if c[1] in {b"slow"} | {f"after{i}".encode() for i in range(5)}]
    assert [(c[0], c[1]) for c in on_moving] == [("a", b"slow")] + [("b", f"after{i}".encode()) for i in range(5)]
    slow_left = on_moving[0][3]
    assert all(c[2] >= slow_left for c in on_moving[1:]), on_moving       # b began once a was done
