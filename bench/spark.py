"""The Spark source against the broker path: a full scan of a store's topic by local Spark reading
the files, and the same messages consumed through the broker with our Python client.

The appliance as it ships (HAProxy, 2 readers) in a temp dir; ``--messages`` messages of
``--body`` bytes are stored in a topic of ``--queues`` queues by two processes sending batches
of 32.  Then, with the appliance idle: (1) Spark (``local[2]``) counts the topic's rows and sums
their body lengths through the ``rocketbox`` source; (2) our PullConsumer reads every queue from
offset 0 to its end through the broker and does the same sums; (3) a pushed-down store-time range
over ``--slice`` of the store, and how many records the plan reads (partitions' offset ranges).
Prints the configuration, rows/s of each, their ratio, and the time-range figures.

    .venv/bin/python -m bench.spark [--messages 1000000] [--body 1024] [--queues 8]
"""
from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import socket
import time

from bench.appliance import BenchAppliance
from bench.e2e import create_topic
from rocketbox.remoting import codec
from rocketbox.remoting.codec import Command
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.store.message import encode_client_batch, encode_properties

TOPIC = "BenchSpark"


def _fill(port: int, first: int, n: int, queues: int, body_size: int, batch: int = 32, window: int = 8) -> int:
    """``n`` messages (UNIQ_KEY ``S<number>``) in batch sends, queue by queue in turn, ``window``
    batches in flight -> how many were refused."""
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    dec, refused, sent, answered, body = codec.Decoder(), 0, 0, 0, b"b" * body_size
    frames = (n + batch - 1) // batch
    for k in range(frames):
        lo = first + k * batch
        props = [encode_properties({"UNIQ_KEY": f"S{i:012d}", "TAGS": "Bench", "KEYS": f"key{i}"})
                 for i in range(lo, min(lo + batch, first + n))]
        ext = {"a": "bench-spark", "b": TOPIC, "c": "TBW102", "d": str(queues), "e": str(k % queues), "f": "0",
               "g": str(int(time.time() * 1000)), "h": "0", "i": props[0], "j": "0", "k": "false", "m": "true"}
        s.sendall(codec.encode(Command(R.SEND_BATCH_MESSAGE, ext, encode_client_batch([(0, body, p) for p in props]))))
        sent += 1
        while sent - answered > window or (sent == frames and answered < frames):
            for r in dec.feed(s.recv(1 << 20)):
                answered += 1
                refused += r.code != 0
    s.close()
    return refused


def _client_scan(namesrv: str) -> tuple[int, int, float]:
    """Every message of the topic through the broker with PullConsumer -> (rows, body bytes, s)."""
    from rocketbox.client.consumer import PullConsumer

    async def run():
        pc = await PullConsumer("bench-spark-client", namesrv).start()
        rows = size = 0
        t0 = time.perf_counter()
        try:
            mqs = await pc.queues(TOPIC)
            await pc.assign(mqs)

            async def one(mq):
                nonlocal rows, size
                pc.seek(mq, 0)
                while (res := await pc.pull(mq, 32)).messages:
                    rows += len(res.messages)
                    size += sum(len(m.body) for m in res.messages)
            await asyncio.gather(*(one(mq) for mq in mqs))
        finally:
            took = time.perf_counter() - t0
            await pc.shutdown()
        return rows, size, took
    return asyncio.run(run())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--slice", type=float, default=0.01, help="share of the store the time-range query covers")
    ap.add_argument("--port", type=int, default=29950)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    print(f"# spark benchmark: {args.messages:,} messages of {args.body} B on {args.queues} queues; Spark local[2] "
          f"through the rocketbox source (pyspark, files read directly) against our PullConsumer through the broker "
          f"(HAProxy, 2 readers, pulls of 32); ASYNC_FLUSH; a time range of {args.slice:.0%} pushed down")
    app = BenchAppliance("rbx-spark-", args.dir, {
        "flushDiskType": "ASYNC_FLUSH", "listenPort": args.port, "brokerName": "bench", "brokerIP1": "127.0.0.1",
        "shmPrefix": "/rbx-spark", "readerProcessNums": 2, "namesrvAddr": f"127.0.0.1:{args.port + 30}"})
    roles = None

    def ready():
        app.wait_serving()
        create_topic(args.port, TOPIC, args.queues)
    app.start(ready=ready)
    try:
        t0 = time.time()
        half = args.messages // 2
        with multiprocessing.get_context("fork").Pool(2) as pool:
            refused = sum(pool.starmap(_fill, [(args.port, 0, half, args.queues, args.body),
                                               (args.port, half, args.messages - half, args.queues, args.body)]))
        fill_s = time.time() - t0
        time.sleep(2)
        from rocketbox.appliance import config
        root = config.load(app.conf).root
        print(f"store: {args.messages - refused:,} messages written in {fill_s:.1f} s ({refused} refused), "
              f"{sum(os.path.getsize(os.path.join(root, 'commitlog', f)) > 0 for f in os.listdir(os.path.join(root, 'commitlog')))} "
              f"CommitLog files")
        from pyspark.sql import functions as F

        from rocketbox.spark import session
        spark = session("bench-spark")
        spark.sparkContext.setLogLevel("ERROR")
        df = spark.read.format("rocketbox").option("path", root).option("topic", TOPIC).load()
        df.limit(1).collect()                                      # the workers up
        t1 = time.perf_counter()
        row = df.agg(F.count("*").alias("n"), F.sum(F.length("body")).alias("bytes")).collect()[0]
        all_s = time.perf_counter() - t1
        print(f"spark, every column: {row.n:,} rows, {row.bytes:,} body bytes in {all_s:.2f} s: {row.n / all_s:,.0f} rows/s")
        narrow = spark.read.format("rocketbox").schema("body binary").option("path", root).option("topic", TOPIC).load()
        t1 = time.perf_counter()
        row = narrow.agg(F.count("*").alias("n"), F.sum(F.length("body")).alias("bytes")).collect()[0]
        spark_s = time.perf_counter() - t1
        print(f"spark, .schema('body binary'): {row.n:,} rows, {row.bytes:,} body bytes in {spark_s:.2f} s: "
              f"{row.n / spark_s:,.0f} rows/s")
        rows, size, client_s = _client_scan(f"127.0.0.1:{args.port + 30}")
        print(f"client: {rows:,} rows, {size:,} body bytes in {client_s:.2f} s: {rows / client_s:,.0f} rows/s")
        print(f"ratio:  {(row.n / spark_s) / (rows / client_s):.1f}x with the body column alone, "
              f"{(row.n / all_s) / (rows / client_s):.1f}x with every column")
        ts = sorted(r.storeTimestamp for r in df.select("storeTimestamp").sample(fraction=min(1.0, 20000 / max(row.n, 1)),
                                                                                   seed=7).collect())
        lo = ts[len(ts) // 2]
        hi_i = min(len(ts) - 1, len(ts) // 2 + max(1, int(len(ts) * args.slice)))
        hi = ts[hi_i]
        from pyspark.sql.datasource import CaseInsensitiveDict, GreaterThanOrEqual, LessThan

        from rocketbox.spark.source import PushdownReader
        reader = PushdownReader(CaseInsensitiveDict({"path": root, "topic": TOPIC}))
        list(reader.pushFilters([GreaterThanOrEqual(("storeTimestamp",), lo), LessThan(("storeTimestamp",), hi)]))
        planned = sum(p.end - p.start for p in reader.partitions())
        t2 = time.perf_counter()
        got = df.where((F.col("storeTimestamp") >= F.lit(lo)) & (F.col("storeTimestamp") < F.lit(hi))).count()
        range_s = time.perf_counter() - t2
        print(f"time range [{lo.isoformat()}, {hi.isoformat()}): {got:,} rows ({got / max(row.n, 1):.2%} of the store); "
              f"the pushed-down plan reads {planned:,} records ({planned / max(row.n, 1):.2%}); {range_s:.2f} s")
        spark.stop()
        roles = app.role_cpu()
    finally:
        app.stop()
    if roles:
        print(f"appliance CPU over the run: {', '.join(f'{k} {v:.1f} s' for k, v in sorted(roles.items()))}")


if __name__ == "__main__":
    main()
