"""What transactions, request-reply and SQL92 filters cost: rocketbox beside the real Apache
RocketMQ 4.9.8, the same Python client driving both, one server after the other.

    .venv/bin/python -m bench.features [--seconds 5] [--window 32] [--messages 1000000] [--no-rocketmq]

Rows, each for ``--seconds`` after a warm-up of a second (``--window`` requests in flight):

  plain send        Producer.send, 1 KiB (--body) messages
  transactional     TransactionProducer.send_in_transaction, the local transaction commits at once
                    (a half message, then END_TRANSACTION: what a committed transaction costs)
  request-reply     Producer.request answered by a push consumer in the same process replying
                    with create_reply (round trips/s; p50 and p99 ms of a round trip)
  SQL92 consume     --messages messages of property p = i % 10 sent first (batches of 100), then a
                    push consumer of "p = 0" (10% match) from the first offset: messages examined
                    per second until the last match arrived

Both brokers run ASYNC_FLUSH with ``enablePropertyFilter=true``, 2 rocketbox readers behind HAProxy,
RocketMQ with a 1 GiB heap. The load generator (this process) shares the box's two cores.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time

from bench.e2e import ROCKETMQ_HOME, RocketMQServer, create_topic

TOPIC = "BenchFeatures"


async def _paced(seconds: float, window: int, one) -> tuple[int, list[float]]:
    """``one()`` with ``window`` in flight for ``seconds`` (after a second's warm-up) -> how many
    finished in the timed part and each one's seconds."""
    done, lat, stop = [0], [], [False]
    timed_from = time.monotonic() + 1.0

    async def worker() -> None:
        while not stop[0]:
            t0 = time.monotonic()
            await one()
            t1 = time.monotonic()
            if t0 >= timed_from:
                done[0] += 1
                lat.append(t1 - t0)
    tasks = [asyncio.ensure_future(worker()) for _ in range(window)]
    await asyncio.sleep(1.0 + seconds)
    stop[0] = True
    await asyncio.gather(*tasks)
    return done[0], lat


async def rows(namesrv: str, args) -> dict:
    from rocketbox import Message, Producer, PushConsumer, TransactionProducer, create_reply
    body, out = os.urandom(args.body), {}
    async with Producer("bench-plain", namesrv) as p:
        n, _lat = await _paced(args.seconds, args.window, lambda: p.send(Message(TOPIC, body)))
        out["plain send"] = {"per_s": n / args.seconds}
    async with TransactionProducer("bench-tx", namesrv, lambda m: "COMMIT") as tx:
        n, _lat = await _paced(args.seconds, args.window,
                               lambda: tx.send_in_transaction(Message(TOPIC, body), lambda m, a: "COMMIT"))
        out["transactional"] = {"per_s": n / args.seconds}
    async with Producer("bench-responder", namesrv) as responder:
        async def answer(msgs) -> bool:
            for m in msgs:
                if "REPLY_TO_CLIENT" in m.properties:
                    await responder.send(create_reply(m, m.body[:16]))
            return True
        consumer = PushConsumer("bench-responders", namesrv)
        await consumer.subscribe(TOPIC + "Rpc").register(answer).start()
        await asyncio.sleep(3)                       # its rebalance takes the queues
        async with Producer("bench-requester", namesrv) as req:
            n, lat = await _paced(args.seconds, args.window,
                                  lambda: req.request(Message(TOPIC + "Rpc", body), timeout_s=10))
        await consumer.shutdown()
        lat.sort()
        out["request-reply"] = {"per_s": n / args.seconds, "p50_ms": 1000 * statistics.median(lat),
                                "p99_ms": 1000 * lat[int(0.99 * (len(lat) - 1))]}
    out["SQL92 consume"] = await _sql_consume(namesrv, args)
    return out


async def _sql_consume(namesrv: str, args) -> dict:
    from rocketbox import Message, Producer, PushConsumer
    topic = TOPIC + "Sql"
    async with Producer("bench-sql-producer", namesrv) as p:
        for first in range(0, args.messages, 100):
            await p.send_batch([Message(topic, b"x" * 64, properties={"p": str(i % 10)})
                                for i in range(first, min(first + 100, args.messages))])
    want, got, done = (args.messages + 9) // 10, [0], asyncio.Event()

    def listener(msgs) -> bool:
        got[0] += len(msgs)
        if got[0] >= want:
            done.set()
        return True
    consumer = PushConsumer("bench-sql", namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET")
    t0 = time.monotonic()
    await consumer.subscribe(topic, "p = 0", sql=True).register(listener).start()
    await asyncio.wait_for(done.wait(), 3600)
    took = time.monotonic() - t0
    await consumer.shutdown()
    return {"per_s": args.messages / took, "matched": got[0]}


def _run_rows(namesrv: str, args) -> dict:
    return asyncio.run(rows(namesrv, args))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--window", type=int, default=32, help="requests in flight")
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--messages", type=int, default=1_000_000, help="messages the SQL92 consumer examines")
    ap.add_argument("--port", type=int, default=29700)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--rocketmq", default=ROCKETMQ_HOME)
    ap.add_argument("--no-rocketmq", action="store_true")
    args = ap.parse_args()
    print(f"# features benchmark: seconds={args.seconds} window={args.window} body={args.body}B "
          f"sql-messages={args.messages} (10% match) client=rocketbox Python, ASYNC_FLUSH, cpus={os.cpu_count()}")
    results = {"rocketbox": _rocketbox(args)}
    if not args.no_rocketmq:
        results["rocketmq"] = _rocketmq(args)
    names = list(results)
    print(f"{'row':<16} " + " ".join(f"{n + ' /s':>14}" for n in names) + "   extra")
    for row in results["rocketbox"]:
        extra = " | ".join(f"{n}: p50 {results[n][row]['p50_ms']:.2f} ms p99 {results[n][row]['p99_ms']:.2f} ms"
                           for n in names if "p50_ms" in results[n][row])
        print(f"{row:<16} " + " ".join(f"{results[n][row]['per_s']:>14,.0f}" for n in names) + f"   {extra}",
              flush=True)


def _rocketbox(args) -> dict:
    from bench.appliance import BenchAppliance
    from bench.client import _wait_registered
    namesrv = f"127.0.0.1:{args.port + 30}"
    app = BenchAppliance("rbx-features-", args.dir, {
        "listenPort": args.port, "brokerName": "bench", "brokerIP1": "127.0.0.1", "shmPrefix": "/rbx-features",
        "namesrvAddr": namesrv, "enablePropertyFilter": "true"})
    try:
        app.start(ready=app.wait_serving)
        _wait_registered(args.port + 30)
        for topic in (TOPIC, TOPIC + "Rpc", TOPIC + "Sql"):
            create_topic(args.port, topic, 4)
        time.sleep(1.5)                              # registered with the name server at its next pass
        return _run_rows(namesrv, args)
    finally:
        app.stop()


def _rocketmq(args) -> dict:
    server = RocketMQServer("ASYNC_FLUSH", args.dir or tempfile.gettempdir(), args.port + 200, args.rocketmq,
                            extra="enablePropertyFilter=true\n")
    try:
        server.start()
        for topic in (TOPIC, TOPIC + "Rpc", TOPIC + "Sql"):
            create_topic(server.port, topic, 4)
        time.sleep(1.5)
        return _run_rows(f"127.0.0.1:{server.port + 50}", args)
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
