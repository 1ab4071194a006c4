"""The pure-Python client against a whole appliance (name server, writer, readers, HAProxy):
exactly-once delivery over a stable group, rebalance on join and leave, broadcasting, tag filters,
resuming from committed offsets after a restart, a reader killed with -9."""
from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import time

import pytest

from rocketbox.client.consumer import PullConsumer, PushConsumer
from rocketbox.client.errors import MQBrokerError, MQClientError
from rocketbox.client.instance import ClientInstance
from rocketbox.client.message import Message
from rocketbox.client.producer import Producer
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from tests.integration.harness import create_topic, dispatched, owned, read_topic, wait_route


async def wait_for(cond, timeout: float = 15.0, step: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        await asyncio.sleep(step)
    return cond()


async def make_topic(app, topic: str) -> Producer:
    """A producer whose first send auto-creates ``topic``; returns once the name server has its route."""
    p = await Producer("pg", app.namesrv).start()
    await p.send(Message(topic, b"init", tags="init"))
    deadline = time.monotonic() + 10
    while True:
        try:
            await p.instance.route(topic, refresh=True)
            return p
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


def tally(seen: collections.Counter) -> str:
    """What a consumer saw, for a failed assertion: totals, duplicates, and the bodies' prefixes."""
    dup = [b for b, n in seen.items() if n > 1]
    prefixes = collections.Counter(b[:1] for b in seen)
    return f"{sum(seen.values())} deliveries of {len(seen)} bodies; by prefix {dict(prefixes)}; duplicated {dup[:8]}"


def consumer(app, group: str, topic: str, seen: collections.Counter, expr: str = "*", **kw) -> PushConsumer:
    c = PushConsumer(group, app.namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET", **kw)
    c.subscribe(topic, expr).register(lambda msgs: seen.update(m.body for m in msgs) or True)
    return c


async def settled(consumers, queues: int) -> bool:
    """Every queue owned by exactly one consumer of the group."""
    async def check():
        for c in consumers:
            await c.rebalance()
        mine = [q for c in consumers for q in owned(c)]
        return len(mine) == queues and len(set(mine)) == queues
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(0.3)
    return False


def test_three_consumers_get_each_message_once_and_rebalance(appliance_factory):
    app = appliance_factory(namesrv=True).start()

    async def run():
        p = await make_topic(app, "Work")
        seen = collections.Counter()
        group = [await consumer(app, "workers", "Work", seen).start() for _ in range(3)]
        assert await settled(group, 4)
        assert sorted(len(owned(c)) for c in group) == [1, 1, 2]      # averagely: 4 queues over 3
        sent = [f"m{i}".encode() for i in range(300)]
        for b in sent:
            assert (await p.send(Message("Work", b, tags="T"))).status == "SEND_OK"
        assert await wait_for(lambda: all(seen[b] >= 1 for b in sent))
        await asyncio.sleep(1)
        assert all(seen[b] == 1 for b in sent) and seen[b"init"] == 1
        # one leaves: its queues move to the others, nothing is lost
        await group.pop().shutdown()
        assert await settled(group, 4)
        more = [f"n{i}".encode() for i in range(200)]
        await asyncio.gather(*(p.send(Message("Work", b)) for b in more))
        assert await wait_for(lambda: all(seen[b] >= 1 for b in more))
        # one joins
        group.append(await consumer(app, "workers", "Work", seen).start())
        assert await settled(group, 4)
        last = [f"o{i}".encode() for i in range(200)]
        await asyncio.gather(*(p.send(Message("Work", b)) for b in last))
        assert await wait_for(lambda: all(seen[b] >= 1 for b in last))
        for c in group:
            await c.shutdown()
        await p.shutdown()

    asyncio.run(run())


def test_a_queue_given_up_is_not_consumed_again_even_when_its_loop_missed_the_cancellation(appliance_factory):
    """A rebalance gives a queue up by cancelling its pull loop, but a cancellation can be lost
    (Python 3.11's ``wait_for``, or here a listener that swallows it).  The loop must still stop
    consuming the queue: before, it went on delivering the queue's messages to the member that
    had given it up while the new owner consumed them too (a live probe of 8 groups saw two
    members on one queue for seconds).  Nothing is lost either."""
    from rocketbox.client.rebalance import allocate_averagely
    app = appliance_factory(namesrv=True).start()

    async def run():
        p = await make_topic(app, "Handover")
        queues = sorted((await p.instance.route("Handover")).write_queues, key=lambda q: q.sort_key())
        deliveries, entered = [], asyncio.Event()            # (body, its queue owned by the member then)
        a = PushConsumer("handover", app.namesrv, consume_from="CONSUME_FROM_LAST_OFFSET")
        b_seen = collections.Counter()
        b = consumer(app, "handover", "Handover", b_seen)
        ids = sorted([a.instance.client_id, b.instance.client_id])
        moving = allocate_averagely(b.instance.client_id, queues, ids)[0]     # a queue a gives up to b

        async def listener(msgs):
            for m in msgs:
                deliveries.append((m.body, any(q.queue_id == m.queue_id for q in a.pullers)))
            if msgs[0].queue_id == moving.queue_id and not entered.is_set():
                entered.set()
                try:
                    await asyncio.sleep(30)                   # held here when b joins
                except asyncio.CancelledError:                # ... and the rebalance's cancel swallowed
                    pass
            return True

        a.subscribe("Handover").register(listener)
        await a.start()
        assert await settled([a], len(queues))
        first = [f"f{i}".encode() for i in range(5)]
        for body in first:
            await p.send(Message("Handover", body), queue=moving)
        await asyncio.wait_for(entered.wait(), 10)           # a's loop of `moving` is in the listener
        later = [f"l{i}".encode() for i in range(5)]
        for body in later:
            await p.send(Message("Handover", body), queue=moving)
        await b.start()
        assert await settled([a, b], len(queues))
        assert moving not in a.pullers and moving in b.pullers
        more = [f"m{i}".encode() for i in range(5)]
        for body in more:
            await p.send(Message("Handover", body), queue=moving)
        assert await wait_for(lambda: all(b_seen[x] >= 1 for x in later + more)), tally(b_seen)
        await asyncio.sleep(1)
        assert [d for d in deliveries if not d[1]] == [], deliveries   # a never consumed what it no longer owned
        got = {body for body, _ in deliveries}
        assert got & set(later + more) == set() and all(x in got or b_seen[x] for x in first)   # nothing lost
        assert all(b_seen[x] == 1 for x in more), tally(b_seen)
        await a.shutdown()
        await b.shutdown()
        await p.shutdown()

    asyncio.run(run())


def test_broadcasting_and_tag_filters(appliance_factory, tmp_path):
    app = appliance_factory(namesrv=True).start()

    async def run():
        p = await make_topic(app, "News")
        a, b, tagged = collections.Counter(), collections.Counter(), collections.Counter()
        ca = await consumer(app, "fans", "News", a, model="BROADCASTING", offset_dir=str(tmp_path / "a")).start()
        cb = await consumer(app, "fans", "News", b, model="BROADCASTING", offset_dir=str(tmp_path / "b")).start()
        ct = await consumer(app, "sports", "News", tagged, expr="Sport || Chess").start()
        for c in (ca, cb, ct):
            await c.rebalance()
            assert await wait_for(lambda c=c: len(owned(c)) == 4, 10)
        for i in range(60):
            await p.send(Message("News", f"x{i}".encode(), tags=["Sport", "Chess", "Weather"][i % 3]))
        want = {f"x{i}".encode() for i in range(60)}
        assert await wait_for(lambda: want <= set(a) and want <= set(b))
        assert await wait_for(lambda: len(tagged) == 40)
        await asyncio.sleep(0.5)
        assert set(tagged) == {f"x{i}".encode() for i in range(60) if i % 3 != 2}
        for c in (ca, cb, ct):
            await c.shutdown()
        assert os.path.exists(ca.offsets.path)
        await p.shutdown()

    asyncio.run(run())


def test_a_broadcasting_member_resumes_from_the_offsets_it_keeps_locally(appliance_factory, tmp_path):
    """BROADCASTING offsets live in the member's own file (Java's LocalFileOffsetStore), under its
    client id: a member started again with the same instance name takes up where it stopped,
    while messages sent in between wait for it."""
    app = appliance_factory(namesrv=True).start()
    first, second = collections.Counter(), collections.Counter()

    def member(seen):
        c = PushConsumer("fans", app.namesrv, model="BROADCASTING", consume_from="CONSUME_FROM_FIRST_OFFSET",
                         offset_dir=str(tmp_path), instance=ClientInstance(app.namesrv, instance_name="member-1"))
        return c.subscribe("Bcast", "*").register(lambda msgs: seen.update(m.body for m in msgs) or True)

    async def run():
        p = await make_topic(app, "Bcast")                              # b"init"
        c = await member(first).start()
        await asyncio.gather(*(p.send(Message("Bcast", b"a%d" % i)) for i in range(10)))
        assert await wait_for(lambda: len(first) == 11), tally(first)
        await c.shutdown()                                              # writes its offsets file
        await asyncio.gather(*(p.send(Message("Bcast", b"b%d" % i)) for i in range(5)))
        c = await member(second).start()
        assert await wait_for(lambda: len(second) == 5), tally(second)
        await asyncio.sleep(1)
        await c.shutdown()
        await p.shutdown()
        return c.offsets.path

    path = asyncio.run(run())
    assert set(first.values()) == {1} and set(second) == {b"b%d" % i for i in range(5)}, (tally(first), tally(second))
    with open(path) as f:
        assert sum(json.load(f)["offsetTable"].values()) == 16                  # every message, once
    for name, text in ((path, "{not json"), (path + ".bak", "")):    # both unreadable: it will not start
        with open(name, "w") as f:
            f.write(text)
    with pytest.raises(MQClientError, match=f"offsets of broadcasting group fans in {path} cannot be read"):
        member(collections.Counter())


def test_a_new_group_on_a_queue_whose_start_is_on_disk_starts_where_consume_from_says(appliance_factory):
    """A group with no committed offset gets 0 only while the queue's first message is in memory
    (RocketMQ's checkInDiskByConsumeOffset); with accessMessageInMemoryMaxRatio=0 every stored
    message counts as on disk, so the broker answers QUERY_NOT_FOUND and a CONSUME_FROM_LAST_OFFSET
    consumer starts at the end instead of reading the queue from its start."""
    app = appliance_factory(namesrv=True, accessMessageInMemoryMaxRatio="0").start()
    seen = collections.Counter()

    async def run():
        p = await make_topic(app, "Long")
        q = (await p.send(Message("Long", b"old-0"))).queue
        for i in range(1, 5):
            await p.send(Message("Long", b"old-%d" % i), queue=q)
        broker = (await p.instance.route("Long")).masters[q.broker_name]
        await dispatched(app)
        ask = {"consumerGroup": "fresh", "topic": "Long", "queueId": str(q.queue_id)}
        with pytest.raises(MQBrokerError) as not_found:
            await p.instance.call(broker, R.QUERY_CONSUMER_OFFSET, ask)
        empty = await p.instance.call(broker, R.QUERY_CONSUMER_OFFSET, {**ask, "queueId": str((q.queue_id + 1) % 4)})
        c = PushConsumer("fresh", app.namesrv, consume_from="CONSUME_FROM_LAST_OFFSET")
        await c.subscribe("Long", "*").register(lambda msgs: seen.update(m.body for m in msgs) or True).start()
        assert await wait_for(lambda: q in c.pullers)
        await asyncio.sleep(0.5)
        await p.send(Message("Long", b"new"), queue=q)
        assert await wait_for(lambda: b"new" in seen), tally(seen)
        await asyncio.sleep(0.5)
        await c.shutdown()
        await p.shutdown()
        return not_found.value, empty

    not_found, empty = asyncio.run(run())
    assert not_found.code == RC.QUERY_NOT_FOUND and "maybe this group consumer boot first" in not_found.remark
    assert (empty.code, empty.ext["offset"]) == (RC.SUCCESS, "0")          # nothing there: from 0
    assert set(seen) == {b"new"}, tally(seen)


def test_consumers_resume_from_committed_offsets_after_a_restart(appliance_factory):
    app = appliance_factory(namesrv=True).start()
    seen = collections.Counter()

    async def first():
        p = await make_topic(app, "Resume")
        c = await consumer(app, "g", "Resume", seen).start()
        await asyncio.gather(*(p.send(Message("Resume", f"a{i}".encode())) for i in range(100)))
        assert await wait_for(lambda: sum(seen.values()) == 101), tally(seen)
        await c.shutdown()                      # commits
        await p.shutdown()

    async def second():
        p = await Producer("pg", app.namesrv).start()
        await asyncio.gather(*(p.send(Message("Resume", f"b{i}".encode())) for i in range(100)))
        c = await consumer(app, "g", "Resume", seen).start()
        assert await wait_for(lambda: sum(seen.values()) == 201), tally(seen)
        await asyncio.sleep(1)
        await c.shutdown()
        await p.shutdown()

    asyncio.run(first())
    assert app.stop() == 0
    app.start()
    asyncio.run(second())
    assert set(seen.values()) == {1} and len(seen) == 201


def test_a_batch_the_listener_refuses_or_fails_on_is_sent_back_and_offered_again_through_the_retry_topic(
        appliance_factory, caplog):
    """A listener that returns False, or raises, has its batch sent back to the broker (as Java's
    RECONSUME_LATER); the queue moves on at once, and the batch comes again through the group's
    retry topic after level 3 (1 s here), under its own topic, reconsume count 1."""
    app = appliance_factory(namesrv=True, messageDelayLevel="1s 1s 1s 1s").start()
    seen, refused, again = collections.Counter(), [], []

    def listener(msgs):
        bodies = [m.body for m in msgs]
        seen.update(bodies)
        again.extend((m.body, m.topic, m.reconsume_times) for m in msgs if m.reconsume_times)
        if b"x3" in bodies and seen[b"x3"] == 1:
            refused.append("False")
            return False
        if b"x5" in bodies and seen[b"x5"] == 1:
            refused.append("raised")
            raise RuntimeError("the listener broke on x5")
        return True

    async def run():
        p = await make_topic(app, "Flaky")
        q = (await p.send(Message("Flaky", b"x0"))).queue
        for i in range(1, 8):
            await p.send(Message("Flaky", f"x{i}".encode()), queue=q)
        c = PushConsumer("flaky", app.namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET", pull_batch=2)
        await c.subscribe("Flaky", "*").register(listener).start()
        assert await wait_for(lambda: {f"x{i}".encode() for i in range(8)} <= set(seen) and len(again) >= 4), tally(seen)
        await asyncio.sleep(0.5)
        await c.shutdown()                                    # commits what was consumed
        pc = await PullConsumer("flaky", app.namesrv).start()
        await pc.assign([q])
        committed = pc.positions[q]
        await pc.shutdown()
        await p.shutdown()
        return q, committed

    q, committed = asyncio.run(run())
    assert refused == ["False", "raised"] and committed == 8, (refused, committed)
    retried = {b for b, n in seen.items() if n == 2}
    assert len(retried) == 4 and {b"x3", b"x5"} <= retried, tally(seen)      # each refused batch: 2 messages
    assert sorted(again) == sorted((b, "Flaky", 1) for b in retried)
    assert [r.getMessage() for r in caplog.records if r.name == "rocketbox.client" and r.exc_info] == [
        f"listener failed on 2 messages of {q}"]


def test_a_concurrent_consumer_pulls_ahead_while_its_listener_has_a_batch(appliance_factory):
    """A concurrent push consumer sends its next pull as soon as a batch arrives (Java's pulls go on
    while its consume threads work), so the broker has transferred the next batch while the
    listener still holds the first; an orderly one pulls only once its batch is consumed.  Seen on
    the broker's own count of messages out (GET_BROKER_RUNTIME_INFO) and in the consumer's running
    info (cachedMsgCount: pulled, not yet consumed); each consumes all 64 in order once, and
    commits 64."""
    from rocketbox.client import running
    from tests.integration.wire import Wire
    app = appliance_factory(namesrv=True).start()
    w = Wire("127.0.0.1", app.cfg.listenPort)

    def sent_out() -> int:
        return int(json.loads(w.call(R.GET_BROKER_RUNTIME_INFO).body)["table"]["msgGetTotalTodayNow"])

    def cached(c: PushConsumer, q) -> int:
        return running.decode(c.running_info(False)).queues[q]["cachedMsgCount"]

    async def one(p, q, group: str, orderly: bool) -> tuple[int, int, list, int]:
        got, entered, release = [], asyncio.Event(), asyncio.Event()

        async def listener(msgs):
            if not entered.is_set():
                entered.set()
                await release.wait()
            got.extend(m.body for m in msgs)
            return True

        before = sent_out()
        c = PushConsumer(group, app.namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET", pull_batch=32, orderly=orderly)
        await c.subscribe("Ahead", "*").register(listener).start()
        await asyncio.wait_for(entered.wait(), 15)
        await wait_for(lambda: sent_out() - before >= 64 and cached(c, q) >= 64, timeout=3)
        out_while_held, cached_while_held = sent_out() - before, cached(c, q)
        release.set()
        assert await wait_for(lambda: len(got) >= 64), len(got)
        await c.shutdown()                                    # commits what was consumed
        pc = await PullConsumer(group, app.namesrv).start()
        await pc.assign([q])
        committed = pc.positions[q]
        await pc.shutdown()
        return out_while_held, cached_while_held, got, committed

    async def run():
        create_topic(app, "Ahead", 1)
        wait_route(app, "Ahead")
        p = await Producer("pg", app.namesrv).start()
        q = (await p.send_batch([Message("Ahead", b"m%02d" % i) for i in range(32)])).queue
        await p.send_batch([Message("Ahead", b"m%02d" % i) for i in range(32, 64)], queue=q)
        orderly = await one(p, q, "in-order", True)
        concurrent = await one(p, q, "ahead", False)
        await p.shutdown()
        return orderly, concurrent

    orderly, concurrent = asyncio.run(run())
    every = [b"m%02d" % i for i in range(64)]
    assert orderly == (32, 32, every, 64)
    assert concurrent == (64, 64, every, 64)


def test_a_record_corrupted_in_the_store_is_reported_and_pulled_again_not_the_end_of_its_queue(
        appliance_factory, caplog):
    """A pull whose records do not decode (here a stored record's magic code overwritten in the
    CommitLog file, as a bad disk would) is logged with where it broke and asked for again: the
    queue's loop lives on, and once the record is whole again every message arrives, none lost.
    Before, the error ended the loop quietly and the queue was never consumed again."""
    from rocketbox.client.consumer import PULL_ERROR_DELAY_S
    from rocketbox.store.message import parse_offset_msg_id
    app = appliance_factory(namesrv=True).start()
    seen = []

    async def run():
        create_topic(app, "Torn", 1)
        wait_route(app, "Torn")
        p = await Producer("pg", app.namesrv).start()
        sent = [await p.send(Message("Torn", b"t%d" % i)) for i in range(3)]
        await p.shutdown()
        await dispatched(app)
        phys = parse_offset_msg_id(sent[1].offset_msg_id)[2]
        size = app.cfg.mappedFileSizeCommitLog
        path = os.path.join(app.cfg.commitlog_dir, "%020d" % (phys // size * size))
        fd = os.open(path, os.O_RDWR)
        try:
            whole = os.pread(fd, 4, phys % size + 4)             # the second record's magic code
            os.pwrite(fd, b"\xde\xad\xbe\xef", phys % size + 4)
            c = PushConsumer("torn", app.namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET", pull_batch=1)
            await c.subscribe("Torn", "*").register(lambda msgs: seen.extend(m.body for m in msgs) or True).start()
            assert await wait_for(lambda: seen == [b"t0"]), seen
            await asyncio.sleep(2 * PULL_ERROR_DELAY_S + 0.5)    # the pull of t1 fails, and again
            stuck = list(seen)
            loop_alive = not c.pullers[owned(c)[0]].done()
        finally:
            os.pwrite(fd, whole, phys % size + 4)
            os.close(fd)
        assert await wait_for(lambda: len(seen) >= 3), seen
        await c.shutdown()
        return stuck, loop_alive

    stuck, loop_alive = asyncio.run(run())
    assert (stuck, loop_alive, seen) == ([b"t0"], True, [b"t0", b"t1", b"t2"])
    errors = [r.getMessage() for r in caplog.records if r.name == "rocketbox.client" and r.exc_info]
    assert len(errors) >= 2 and all(e.startswith("pull from MessageQueue(topic='Torn'") and "at offset 1 failed" in e
                                    for e in errors), errors
    assert "bad magic code 0xdeadbeef" in caplog.text


def test_a_reader_killed_with_kill9_loses_nothing_acknowledged(appliance_factory):
    """Every acknowledged send is stored.  A body stored twice is allowed only as RocketMQ allows it:
    one send that the client retried (its first try landed but the reply was lost or late), which
    consumers can tell by the copies' shared message id (UNIQ_KEY)."""
    app = appliance_factory(namesrv=True).start()
    acked: list[bytes] = []

    async def run():
        p = await make_topic(app, "Crash")
        killed = False
        for i in range(400):
            if i == 150:
                os.kill(app.role_pid("reader-0"), signal.SIGKILL)
                os.kill(app.role_pid("reader-1"), signal.SIGKILL)
                killed = True
            try:
                r = await p.send(Message("Crash", f"k{i}".encode()))
                if r.status == "SEND_OK":
                    acked.append(f"k{i}".encode())
            except Exception:
                await asyncio.sleep(0.2)          # the readers are restarting; the client reconnects
        assert killed and len(acked) > 300
        ids = collections.defaultdict(list)       # body -> the message id of each stored copy
        for m in await read_topic(app, "Crash"):
            ids[m.body].append(m.msg_id)
        await p.shutdown()
        return ids

    ids = asyncio.run(run())
    lost = [b for b in acked if not ids.get(b)]
    assert not lost, f"acknowledged but not stored: {lost[:5]}"
    doubled = {b: v for b, v in ids.items() if len(v) > 1}
    assert all(len(set(v)) == 1 for v in doubled.values()), f"copies that are not one retried send: {doubled}"
    assert len(doubled) <= 2, f"more retried duplicates than sends in flight around the kill: {doubled}"
    assert "reader-0 exited" in app.log_text()


def test_a_send_whose_tries_all_fail_says_whether_it_may_be_stored(appliance_factory):
    """The writer stopped (SIGSTOP): the first try is taken by the reader and goes unanswered
    within the send time-out, the retries are answered SYSTEM_BUSY by the reader's flow control.
    The error the producer raises is the last try's, and says the message may be stored; once the
    writer runs again it is, once.  A send refused outright says it is not."""
    from rocketbox.client.errors import MQBrokerError
    from rocketbox.remoting.codes import ResponseCode as RC
    app = appliance_factory(namesrv=True).start()

    async def run():
        p = await make_topic(app, "Maybe")
        p.timeout_s = 0.5
        writer = app.role_pid("writer")
        os.kill(writer, signal.SIGSTOP)
        try:
            try:
                await p.send(Message("Maybe", b"unanswered"))
                raise AssertionError("a send went through a stopped writer")
            except MQBrokerError as e:
                first = e
            await asyncio.sleep(1.2)                      # stuck past osPageCacheBusyTimeOutMills
            try:
                await p.send(Message("Maybe", b"refused"))
                raise AssertionError("a send went through a stopped writer")
            except MQBrokerError as e:
                second = e
        finally:
            os.kill(writer, signal.SIGCONT)
        bodies = collections.Counter(m.body for m in await read_topic(app, "Maybe"))
        await p.shutdown()
        return first, second, bodies

    first, second, bodies = asyncio.run(run())
    assert first.code == RC.SYSTEM_BUSY and first.may_be_stored, (first, first.may_be_stored)
    assert second.code == RC.SYSTEM_BUSY and second.remark.startswith("[REJECTREQUEST]") and not second.may_be_stored
    assert bodies == collections.Counter({b"init": 1, b"unanswered": 1}), bodies
