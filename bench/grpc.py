"""The gRPC rows of ``bench.e2e`` (RocketMQ 5.x's protocol, the gRPC front; issue #55): load
generators for an appliance that runs its gRPC front, each returning a row as ``bench.e2e``'s
``summarize`` makes one.

  run_grpc     SendMessage of one message, ``window`` calls in flight per channel (``grpc.aio``),
               ``procs`` processes x ``conns`` channels (the remoting rows' shape); ``rate`` > 0
               paces them
  run_client   the official Python client's ``Producer.send`` (synchronous, as its users call it),
               ``client_threads`` threads in one process (``PYTHONPATH=<venv>/rocketmq5``)

Each counts acknowledged messages in the measured window (after ``warmup`` s), and every one
acknowledged (``msgs``) for the CPU per message.
"""
from __future__ import annotations

import asyncio
import collections
import os
import resource
import subprocess
import sys
import time

import numpy as np

from bench.e2e import QUEUES, TOPIC, _fan_out, summarize
from rocketbox.grpcfront import v2

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
