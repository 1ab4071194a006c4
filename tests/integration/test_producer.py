"""The pure-Python producer and pull consumer against whole appliances, and ``appliance produce`` /
``appliance consume``: every kind of send stored once where its result says, ordered sends kept
in order per queue, errors typed by response code, a retry on another broker when one has died."""
from __future__ import annotations

import asyncio
import collections
import signal
import subprocess
import sys
import time

import pytest

from rocketbox.client.consumer import PullConsumer
from rocketbox.client.errors import MQBrokerError
from rocketbox.client.message import Message
from rocketbox.client.producer import Producer
from rocketbox.remoting.codes import ResponseCode as RC
from tests.integration.harness import ROOT, create_topic, dispatched, read_topic
from tests.integration.test_clients import make_topic


def by_position(stored) -> dict:
    return {(m.queue_id, m.queue_offset): m for m in stored}


def test_sync_async_oneway_batch_and_ordered_sends_are_each_stored_once_where_their_results_say(appliance_factory):
    app = appliance_factory(namesrv=True).start()

    async def run():
        p = await make_topic(app, "Kinds")                                 # stores b"init"
        single = await p.send(Message("Kinds", b"sync", tags="TagA", keys=["k1", "k2"]))
        asynced = await asyncio.gather(*(p.send_async(Message("Kinds", f"async-{i}".encode())) for i in range(20)))
        for i in range(5):
            assert await p.send_oneway(Message("Kinds", f"oneway-{i}".encode())) is None
        batch = await p.send_batch([Message("Kinds", f"batch-{i}".encode(), tags="TagB", keys=f"bk{i}")
                                    for i in range(10)])
        ordered = {}                     # order -> its results, step by step; an order's queue is order % queues
        for step in range(5):
            for order in range(4):
                r = await p.send(Message("Kinds", f"order-{order}-{step}".encode()),
                                 selector=lambda queues, _msg, arg: queues[arg % len(queues)], arg=order)
                ordered.setdefault(order, []).append(r)
        with pytest.raises(MQBrokerError) as too_big:
            await p.send(Message("Kinds", b"x" * (app.cfg.maxMessageSize + 1)))
        for bad in ([], [Message("Kinds", b"a"), Message("Other", b"b")], [Message("Kinds", b"a", delay_level=2)]):
            with pytest.raises(ValueError):
                await p.send_batch(bad)
        await p.shutdown()
        return single, asynced, batch, ordered, too_big.value, await read_topic(app, "Kinds")

    single, asynced, batch, ordered, too_big, stored = asyncio.run(run())
    at = by_position(stored)

    counts = collections.Counter(m.body for m in stored)
    assert set(counts.values()) == {1} and len(stored) == 1 + 1 + 20 + 5 + 10 + 20, counts
    assert {b"oneway-%d" % i for i in range(5)} <= set(counts)

    for r in [single, *asynced, *(r for rs in ordered.values() for r in rs)]:   # where each result says
        m = at[r.queue.queue_id, r.queue_offset]
        assert r.status == "SEND_OK" and (m.msg_id, m.offset_msg_id) == (r.msg_id, r.offset_msg_id)
    m = at[single.queue.queue_id, single.queue_offset]
    assert (m.body, m.tags, m.keys) == (b"sync", "TagA", ["k1", "k2"])
    assert sorted(at[r.queue.queue_id, r.queue_offset].body for r in asynced) == sorted(
        f"async-{i}".encode() for i in range(20))

    # a batch: one queue, consecutive offsets, its msgIds the messages' UNIQ_KEYs in order
    records = [at[batch.queue.queue_id, batch.queue_offset + i] for i in range(10)]
    assert [m.body for m in records] == [f"batch-{i}".encode() for i in range(10)]
    assert [m.keys for m in records] == [[f"bk{i}"] for i in range(10)] and {m.tags for m in records} == {"TagB"}
    assert batch.msg_id.split(",") == [m.msg_id for m in records]
    assert batch.offset_msg_id.split(",") == [m.offset_msg_id for m in records]

    # ordered: every order's steps in one queue, in step order
    for order, results in ordered.items():
        assert {r.queue.queue_id for r in results} == {order % 4}
        offsets = [r.queue_offset for r in results]
        assert offsets == sorted(offsets)
        assert [at[order % 4, o].body for o in offsets] == [f"order-{order}-{s}".encode() for s in range(5)]

    assert too_big.code == RC.MESSAGE_ILLEGAL and not too_big.retriable and not too_big.may_be_stored
    assert "maxMessageSize" in too_big.remark


def test_a_send_to_a_broker_that_died_is_retried_on_the_other(appliance_factory):
    """Two brokers on one host, one name server: with b2 killed (its route still at the name server,
    as for up to 120 s after a crash), every send whose queue is on b2 fails its first try and is
    retried on b1, and is stored there once."""
    b1 = appliance_factory(namesrv=True).start()
    b2 = appliance_factory(namesrvAddr=b1.namesrv, startNameServer="false", brokerName="b2").start()
    for app in (b1, b2):
        create_topic(app, "Both", 4)

    async def run():
        p = await Producer("pg", b1.namesrv).start()
        deadline = time.monotonic() + 10
        while set((await p.instance.route("Both", refresh=True)).masters) != {"b1", "b2"}:
            assert time.monotonic() < deadline, "the name server never listed both brokers"
            await asyncio.sleep(0.2)
        b2.kill9()
        results = [await p.send(Message("Both", f"m{i}".encode())) for i in range(16)]
        await p.shutdown()
        return results, await read_topic(b1, "Both")

    results, stored = asyncio.run(run())
    assert [(r.status, r.queue.broker_name) for r in results] == [("SEND_OK", "b1")] * 16
    assert sorted(m.body for m in stored) == sorted(f"m{i}".encode() for i in range(16))
    assert {(r.queue.queue_id, r.queue_offset) for r in results} == {(m.queue_id, m.queue_offset) for m in stored}


def cli(app, *args, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rocketbox.appliance", *args, "-c", app.conf], cwd=ROOT, input=stdin,
                          capture_output=True, text=True, timeout=60)


def test_the_cli_produces_from_arguments_and_stdin_and_tails_a_topic(appliance_factory, tmp_path):
    app = appliance_factory(namesrv=True).start()
    r = cli(app, "produce", "-t", "Cli", "--tags", "TagA", "--keys", "k1", "one", "two")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("SEND_OK msgId=") for line in lines), r.stdout
    r = cli(app, "produce", "-t", "Cli", stdin="three\nfour\n")
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 2, (r.stdout, r.stderr)

    tail = subprocess.Popen([sys.executable, "-m", "rocketbox.appliance", "consume", "-t", "Cli", "--from-first",
                             "-e", "TagA", "-c", app.conf], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        seen, deadline = [], time.monotonic() + 30
        while len(seen) < 2 and time.monotonic() < deadline:
            seen.append(tail.stdout.readline().rstrip("\n"))
        tail.send_signal(signal.SIGINT)
        out, err = tail.communicate(timeout=30)
    finally:
        if tail.poll() is None:
            tail.kill()
    assert tail.returncode == 0, err
    seen += out.splitlines()
    # only TagA: the two sent with it, each once, with where it is stored
    assert sorted(line.rsplit(" ", 1)[1] for line in seen) == ["one", "two"], seen
    assert all(" tags=TagA " in line and line.startswith("queue=") and " offset=" in line for line in seen), seen
    assert {line.split(" msgId=")[1].split()[0] for line in seen} == {
        line.split("msgId=")[1].split()[0] for line in lines}

    alone = tmp_path / "alone.conf"                             # no name server: says so, exit 2
    alone.write_text("namesrvAddr=\n")
    r = subprocess.run([sys.executable, "-m", "rocketbox.appliance", "produce", "-t", "Cli", "-c", str(alone), "x"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stderr.strip()) == (2, "appliance: no name server: pass --namesrv or set namesrvAddr")
    r = cli(app, "produce", "-t", "bad topic!", "x")             # a broker's refusal: its code, exit 1
    assert r.returncode == 1 and r.stderr.startswith("appliance produce: ") and "(1)" in r.stderr, r.stderr


def test_pull_consumer_assigns_seeks_filters_waits_and_commits(appliance_factory):
    app = appliance_factory(namesrv=True).start()

    async def run():
        p = await make_topic(app, "Pulled")
        q = (await p.send(Message("Pulled", b"m0", tags="TagA"))).queue
        for i in range(1, 10):                                  # m0..m9 in one queue, tags A, B, C in turn
            await p.send(Message("Pulled", f"m{i}".encode(), tags=f"Tag{'ABC'[i % 3]}"), queue=q)
        pc = await PullConsumer("puller", app.namesrv).start()
        mq = next(m for m in await pc.queues("Pulled") if m == q)
        await pc.assign([mq])                                   # no committed offset: from 0
        await dispatched(app)
        out = {"bounds": await pc.offset_bounds(mq), "start": pc.positions[mq]}
        pc.seek(mq, 4)
        r = await pc.pull(mq, 3)
        out["seek"] = (r.status, [m.body for m in r.messages], r.next_offset, pc.positions[mq])
        r = await pc.pull(mq, 32, "TagA || TagC")
        out["filtered"] = (r.status, [m.body for m in r.messages], r.next_offset)
        r = await pc.pull(mq, 32)
        out["end"] = (r.status, r.messages, r.next_offset)
        t0 = time.monotonic()
        waiting = asyncio.ensure_future(pc.pull(mq, 32, block_ms=10_000))
        await asyncio.sleep(0.5)
        await p.send(Message("Pulled", b"late", tags="TagA"), queue=q)
        r = await waiting
        out["held"] = (r.status, [m.body for m in r.messages], time.monotonic() - t0 < 5)
        pc.seek(mq, 99)
        r = await pc.pull(mq)
        out["beyond"] = (r.status, r.next_offset)
        pc.seek(mq, 6)
        await pc.commit(mq)
        await pc.shutdown()
        again = await PullConsumer("puller", app.namesrv).start()   # the group resumes where it committed
        await again.assign([mq])
        out["resumed"] = again.positions[mq]
        await again.shutdown()
        await p.shutdown()
        return out

    out = asyncio.run(run())
    assert out["bounds"] == (0, 10) and out["start"] == 0
    assert out["seek"] == ("FOUND", [b"m4", b"m5", b"m6"], 7, 7)
    # broker-side the filter is by tag hash, the client re-checks the strings: m7 (B) is left out
    assert out["filtered"] == ("FOUND", [b"m8", b"m9"], 10)
    assert out["end"] == ("NO_NEW_MSG", [], 10)
    assert out["held"] == ("FOUND", [b"late"], True)
    assert out["beyond"] == ("OFFSET_ILLEGAL", 11)
    assert out["resumed"] == 6
