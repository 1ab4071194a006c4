"""gRPC sends (RocketMQ 5.x's protocol, the gRPC front) beside the 4.x remoting path, on one appliance
under the same load shape, in the same run (issue #55).

One appliance (ASYNC_FLUSH, HAProxy in front of ``--readers`` readers, the gRPC front on
listenPort + 33; the real RocketMQ 4.9.8 has no gRPC front to compare with). Rows:

  remoting send single   SEND_MESSAGE_V2 with JSON headers, pipelined (``bench.e2e``'s generator)
  gRPC send single       SendMessage of one message, ``--window`` calls in flight per channel
                         (``grpc.aio``), ``--procs`` processes x ``--conns`` channels
  gRPC send at RATE/s    the same paced at ``--rate`` msgs/s: p50/p99/p99.9
  5.x client send        the official Python client's ``Producer.send`` (synchronous, as its
                         users call it), ``--client-threads`` threads in one process

Each row counts acknowledged messages in the measured window (after ``--warmup`` s) and prints
the appliance's CPU per message by role.

    .venv/bin/python -m bench.grpc [--seconds 5] [--procs 2] [--conns 4] [--window 16] [--rate 5000]
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import os
import resource
import subprocess
import sys
import time

import numpy as np

from bench.appliance import BenchAppliance
from bench.e2e import QUEUES, TOPIC, Rocketbox, _fan_out, create_topic, run_load, summarize
from rocketbox.grpcfront import v2
from rocketbox.remoting import codec

CLIENT = """
import sys, threading, time
from rocketmq import ClientConfiguration, Credentials, Message, Producer
endpoint, topic, seconds, warmup, threads = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
p = Producer(ClientConfiguration(endpoint, Credentials()), (topic,))
p.startup()
t0 = time.perf_counter(); m0, t_end = t0 + warmup, t0 + warmup + seconds
lats, total, lock = [], [0], threading.Lock()
def run():
    m = Message(); m.topic, m.body, m.tag = topic, b"x" * 1024, "TagA"
    while (now := time.perf_counter()) < t_end:
        p.send(m)
        t = time.perf_counter()
        with lock:
            total[0] += 1
        if now >= m0:
            with lock:
                lats.append(t - now)
ts = [threading.Thread(target=run) for _ in range(threads)]
[t.start() for t in ts]; [t.join() for t in ts]
p.shutdown()
print(total[0], len(lats), " ".join("%.6f" % x for x in lats))
"""


def _requests(proto, body: bytes, n: int) -> list[bytes]:
    """``n`` SendMessage requests of one message each, queue by queue in turn, serialized once."""
    out, pid = [], os.getpid()
    for i in range(n):
        req = proto.SendMessageRequest()
        m = req.messages.add()
        m.topic.name, m.body = TOPIC, body
        sp = m.system_properties
        sp.tag, sp.message_id, sp.queue_id, sp.body_encoding = "TagA", f"{pid:08X}{i:016X}", i % QUEUES, 1
        sp.keys.append(f"k{i}")
        out.append(req.SerializeToString())
    return out


def _grpc_load(endpoint: str, conns: int, window: int, seconds: float, warmup: float, rate: float, out) -> None:
    """One generator process: ``conns`` channels, ``window`` SendMessage calls in flight on each (or
    paced at ``rate`` msgs/s over them); reports acked messages, errors and latencies."""
    import grpc
    proto = v2.load()
    requests = _requests(proto, b"x" * 1024, 4096)
    ok = proto.code("OK")

    async def main():
        channels = [grpc.aio.insecure_channel(endpoint) for _ in range(conns)]
        calls = [ch.unary_unary(f"/{v2.SERVICE}/SendMessage", response_deserializer=proto.SendMessageResponse.FromString)
                 for ch in channels]
        t0 = time.perf_counter()
        m0, t_end = t0 + warmup, t0 + warmup + seconds
        acked, total, errors, lats, issued = 0, 0, collections.Counter(), [], [0]

        async def worker(call, k: int):
            nonlocal acked, total
            while (now := time.perf_counter()) < t_end:
                if rate > 0:
                    due = t0 + issued[0] / rate
                    if due > now:
                        await asyncio.sleep(due - now)
                        continue
                issued[0] += 1
                sent = time.perf_counter()
                r = await call(requests[k % len(requests)], timeout=30)
                k += conns * window
                if r.status.code != ok:
                    errors[r.status.code] += 1
                    continue
                total += 1
                if sent >= m0:
                    acked += 1
                    lats.append(time.perf_counter() - sent)
        await asyncio.gather(*(worker(calls[c], c * window + w) for c in range(conns) for w in range(window)))
        for ch in channels:
            await ch.close()
        return acked, total, dict(errors), lats
    acked, total, errors, lats = asyncio.run(main())
    out.put({"acked": acked, "total": total, "errors": errors, "lat": np.array(lats, dtype=np.float64)})


def run_grpc(endpoint: str, args, rate: float = 0.0) -> dict:
    res, gen_cpu = _fan_out(_grpc_load, [(endpoint, args.conns, args.window, args.seconds, args.warmup,
                                          rate / args.procs)] * args.procs, timeout=args.seconds + args.warmup + 120)
    return {**summarize(res, args.seconds, gen_cpu), "msgs": sum(r["total"] for r in res)}


def run_client(endpoint: str, args) -> dict:
    """The official Python 5.x client, in its own process (``PYTHONPATH=<venv>/rocketmq5``)."""
    t = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([sys.executable, "-c", CLIENT, endpoint, TOPIC, str(args.seconds), str(args.warmup),
                        str(args.client_threads)], env=dict(os.environ, PYTHONPATH=v2.default_dir()),
                       capture_output=True, text=True, timeout=args.seconds + args.warmup + 120, cwd="/tmp")
    if p.returncode:
        raise RuntimeError(f"the 5.x client failed: {p.stderr[-2000:]}")
    total, n, *lats = p.stdout.split()
    res = [{"acked": int(n), "errors": {}, "lat": np.array([float(x) for x in lats])}]
    u = resource.getrusage(resource.RUSAGE_CHILDREN)          # (the client's process: the load generator)
    return {**summarize(res, args.seconds, u.ru_utime + u.ru_stime - t.ru_utime - t.ru_stime), "msgs": int(total)}


def main() -> None:
    ap = argparse.ArgumentParser(prog="bench.grpc", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--conns", type=int, default=4)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--rate", type=float, default=5000.0)
    ap.add_argument("--client-threads", type=int, default=8)
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--port", type=int, default=31911)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    app = BenchAppliance("rbx-grpc-", args.dir, {
        "flushDiskType": "ASYNC_FLUSH", "listenPort": args.port, "brokerName": "bench", "brokerIP1": "127.0.0.1",
        "shmPrefix": "/rbx-grpc", "namesrvAddr": "", "readerProcessNums": args.readers, "metricsPort": 0,
        "grpcListenPort": args.port + 33})
    print(f"# grpc benchmark: body=1024B seconds={args.seconds:g} warmup={args.warmup:g} procs={args.procs} "
          f"conns/proc={args.conns} window={args.window} rate={args.rate:g} client-threads={args.client_threads} "
          f"readers={args.readers} flush=ASYNC_FLUSH cpus={os.cpu_count()} protocol={v2.PROTOCOL}")
    print(f"{'row':<28} {'msgs/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'p99.9 ms':>9}  rocketbox CPU µs/msg by role")

    def ready():
        app.wait_serving()
        create_topic(args.port, TOPIC, QUEUES)
    app.start(ready=ready)
    endpoint = f"127.0.0.1:{args.port + 33}"
    try:
        rows = [("remoting send single", lambda: run_load("rocketbox", args.port, Rocketbox.send_frames(
                    b"x" * 1024, 1, codec.JSON), args, args.window)),
                ("gRPC send single", lambda: run_grpc(endpoint, args)),
                (f"gRPC send at {args.rate:g}/s", lambda: run_grpc(endpoint, args, rate=args.rate)),
                ("5.x client send", lambda: run_client(endpoint, args))]
        for name, run in rows:
            before = app.role_cpu()
            r = run()
            after = app.role_cpu()
            n = r["msgs_per_s"] * args.seconds or 1
            cpu = " ".join(f"{role} {(after[role] - before.get(role, 0)) / n * 1e6:.1f}" for role in sorted(after)
                           if after[role] - before.get(role, 0) > 0.005)
            errs = f"  errors {r['errors']}" if r["errors"] else ""
            print(f"{name:<28} {r['msgs_per_s']:>10.0f} {r['p50']:>8.2f} {r['p99']:>8.2f} {r['p999']:>9.2f}  {cpu}{errs}",
                  flush=True)
    finally:
        app.stop()


if __name__ == "__main__":
    main()
