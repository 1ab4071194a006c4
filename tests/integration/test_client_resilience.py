"""The Python client across a broker's restart, at shutdown, and the lite pull consumer's offsets."""
import asyncio
import time

from rocketbox import LitePullConsumer, Message, MQClientError, Producer, PushConsumer


def test_a_consumer_and_a_producer_survive_the_brokers_restart_and_lose_nothing(appliance_factory):
    """Sends while the appliance is down fail as retriable MQClientErrors; once it is back the
    same producer sends again and the same consumer (its pull loops backing off meanwhile) gets
    every acknowledged message."""
    app = appliance_factory(namesrv=True).start()

    async def run():
        got, acked = set(), []
        consumer = PushConsumer("resilient", app.namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET")
        consumer.subscribe("Resilient").register(lambda msgs: got.update(m.body for m in msgs) or True)
        producer = await Producer("resilient-p", app.namesrv, send_timeout_s=1.0).start()
        acked += [(await producer.send(Message("Resilient", b"before-%d" % i))).status for i in range(10)]
        await consumer.start()
        while len(got) < 10:
            await asyncio.sleep(0.1)
        assert await asyncio.to_thread(app.stop) == 0
        try:
            await producer.send(Message("Resilient", b"lost"))
            down = None
        except MQClientError as e:
            down = (type(e).__name__, e.retriable)
        await asyncio.sleep(4)                            # the pull loops fail and back off
        paused = dict(consumer.backoff)
        await asyncio.to_thread(app.start)
        t0 = time.monotonic()
        for i in range(10):
            for _ in range(30):                           # until the producer finds the broker again
                try:
                    acked.append((await producer.send(Message("Resilient", b"after-%d" % i))).status)
                    break
                except MQClientError:
                    await asyncio.sleep(0.5)
        while len(got) < 20 and time.monotonic() - t0 < 60:
            await asyncio.sleep(0.2)
        await producer.shutdown()
        await consumer.shutdown()
        return got, acked, down, paused

    got, acked, down, paused = asyncio.run(run())
    assert acked == ["SEND_OK"] * 20
    assert down[1] is True and down[0] in ("MQClientError", "MQBrokerError"), down
    assert paused and all(3.0 <= p <= 30.0 for p in paused.values()), paused
    assert got == {b"before-%d" % i for i in range(10)} | {b"after-%d" % i for i in range(10)}


def test_shutdown_waits_for_sends_in_flight(appliance_factory):
    app = appliance_factory(namesrv=True).start()

    async def run():
        producer = await Producer("inflight", app.namesrv).start()
        await producer.send(Message("InFlight", b"first"))           # the route is known
        tasks = [producer.send_async(Message("InFlight", b"m%d" % i)) for i in range(50)]
        await producer.shutdown()                                       # without awaiting the tasks
        return [t.done() and not t.cancelled() and t.result().status for t in tasks]

    assert asyncio.run(run()) == ["SEND_OK"] * 50


def test_a_lite_pull_consumer_moves_offsets_as_it_polls_and_commits_only_when_asked(appliance_factory):
    """Without auto_commit, what was polled and not committed is polled again by the group's next
    member (at least once); after a commit, the next member starts past it; seek moves a queue."""
    app = appliance_factory(namesrv=True).start()

    async def drain(consumer, n):
        out = []
        while len(out) < n:
            msgs = await consumer.poll(timeout_s=20)
            assert msgs, out
            out += msgs
        return out

    async def run():
        async with Producer("lite-p", app.namesrv) as p:
            mq = (await p.send(Message("Lite", b"m0"))).queue
            for i in range(1, 12):
                await p.send(Message("Lite", b"m%d" % i), queue=mq)
        first = LitePullConsumer("lite", app.namesrv, auto_commit=False, consume_from="CONSUME_FROM_FIRST_OFFSET",
                                 pull_batch=4)
        await first.assign([mq]).start()
        polled = [m.body for m in await drain(first, 4)]
        await first.shutdown()                                          # nothing committed
        second = LitePullConsumer("lite", app.namesrv, auto_commit=False, consume_from="CONSUME_FROM_FIRST_OFFSET",
                                  pull_batch=4)
        await second.assign([mq]).start()
        again = [m.body for m in await drain(second, 8)]
        await second.commit()
        await second.seek(mq, 10)
        sought = [m.body for m in await drain(second, 2)]
        await second.shutdown()
        third = LitePullConsumer("lite", app.namesrv, auto_commit=False, pull_batch=4)
        await third.assign([mq]).start()
        rest = [m.body for m in await drain(third, 4)]
        await third.shutdown()
        return polled, again, sought, rest

    polled, again, sought, rest = asyncio.run(run())
    assert polled[:4] == [b"m0", b"m1", b"m2", b"m3"]                  # (a poll may have brought a fifth)
    assert polled == [b"m%d" % i for i in range(len(polled))]
    assert again == [b"m%d" % i for i in range(8)]                      # polled before, not committed: again
    assert sought == [b"m10", b"m11"]
    assert rest == [b"m8", b"m9", b"m10", b"m11"]                       # from the commit (8), not the seek
