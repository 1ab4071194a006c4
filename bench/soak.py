"""What clients that come and go cost the appliance over time: each role's memory and open files.

One appliance (name server, readers, HAProxy), ``--topics`` topics of 8 queues and ``--groups``
consumer groups.  Cycle after cycle for ``--seconds``, at once:
  * a producer (a client instance of its own, so new connections) sends ``--messages`` messages,
    each to a random topic;
  * two push consumers of random groups (one orderly) join, consume for 0.5-3 s and leave, every
    fourth of them by dropping its connections first, as a killed client would;
  * a raw connection sends garbage, half a frame, or a long-polled pull and closes.
Every ``--every`` s: each role's anonymous memory (its heap; the store's and shared memory's mapped
pages are not counted) and open file descriptors.  Then each role's growth from the first sample
after ``--warmup`` s to the last: a role that keeps something per connection, client or request
grows with the cycles; caches grow to their bound and stop.

    .venv/bin/python -m bench.soak [--seconds 600] [--every 20] [--warmup 60] [--messages 50]
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import random
import socket
import time

from bench.appliance import BenchAppliance
from bench.e2e import create_topic
from rocketbox.client.consumer import PushConsumer
from rocketbox.client.message import Message
from rocketbox.client.producer import Producer
from rocketbox.remoting import codec
from rocketbox.remoting.codec import Command
from rocketbox.remoting.codes import RequestCode as R

QUEUES = 8


class Soak:
    def __init__(self, args):
        self.args = args
        self.topics = [f"Soak{i}" for i in range(args.topics)]
        self.groups = [f"soak_group{i}" for i in range(args.groups)]
        self.sent = self.acked = self.cycles = 0

    async def producer(self, i: int) -> None:
        async with Producer(f"soak_producer{i % 4}", self.args.namesrv) as p:
            for _ in range(self.args.messages):
                self.sent += 1
                r = await p.send(Message(random.choice(self.topics), b"x" * 512, tags=f"T{i % 3}", keys=f"k{i}"))
                self.acked += r.status == "SEND_OK"

    async def consumer(self, i: int) -> None:
        c = PushConsumer(random.choice(self.groups), self.args.namesrv, orderly=i % 2 == 0)
        c.subscribe(random.choice(self.topics), "T1 || T2").register(lambda msgs: True)
        await c.start()
        await asyncio.sleep(random.uniform(0.5, 3))
        if i % 4 == 0:                                  # vanish: connections gone before it unregisters
            for conn in list(c.instance.conns.values()):
                conn.close()
        await c.shutdown()

    def raw(self, i: int) -> None:
        with socket.create_connection(("127.0.0.1", self.args.port), timeout=5) as s:
            if i % 3 == 0:
                s.sendall(b"\x00\x00\x00\x10garbage garbage!")
            elif i % 3 == 1:
                s.sendall(b"\x00\x00\x00\x40\x00")       # half a frame
            else:
                s.sendall(codec.encode(Command(int(R.PULL_MESSAGE), {
                    "consumerGroup": "soak_raw", "topic": self.topics[0], "queueId": "0",
                    "queueOffset": str(2**40), "maxMsgNums": "32", "sysFlag": "2", "commitOffset": "0",
                    "suspendTimeoutMillis": "20000", "subscription": "*", "subVersion": "0"})))
                time.sleep(0.05)

    async def cycle(self) -> None:
        i = self.cycles
        await asyncio.gather(self.producer(i), self.consumer(2 * i), self.consumer(2 * i + 1),
                             asyncio.to_thread(self.raw, i))
        self.cycles += 1


def _row(t: float, cycles: int, mem: dict) -> str:
    return f"{t:>6.0f} {cycles:>7} " + " ".join(f"{mem[r][0]:>11} {mem[r][1]:>4}" for r in sorted(mem))


async def run(app: BenchAppliance, args) -> int:
    soak = Soak(args)
    for topic in soak.topics:
        create_topic(args.port, topic, QUEUES)
    roles = sorted(app.role_memory())
    print(f"{'s':>6} {'cycles':>7} " + " ".join(f"{r[:11]:>11} {'fds':>4}" for r in roles))
    t0, samples, next_at = time.monotonic(), [], 0.0
    while True:
        t = time.monotonic() - t0
        if t >= next_at or t >= args.seconds:
            mem = app.role_memory()
            mem = {r: mem.get(r, (0, 0)) for r in roles}
            samples.append((t, soak.cycles, mem))
            print(_row(t, soak.cycles, mem), flush=True)
            next_at += args.every
        if t >= args.seconds:
            break
        await soak.cycle()
    base = next((s for s in samples if s[0] >= args.warmup), samples[0])
    t1, c1, last = samples[-1]
    cycles = max(1, c1 - base[1])
    print(f"# from {base[0]:.0f} s to {t1:.0f} s ({c1 - base[1]} cycles): growth of each role's anonymous memory "
          "(KiB, and per cycle) and open files")
    for r in roles:
        grew = last[r][0] - base[2][r][0]
        print(f"{r:<14} {grew:>+8} KiB {grew / cycles:>+8.2f} KiB/cycle {last[r][1] - base[2][r][1]:>+5} fds")
    print(f"# {soak.acked} of {soak.sent} sends acknowledged over {soak.cycles} cycles")
    return 0 if soak.acked == soak.sent else 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--every", type=float, default=20, help="seconds between samples")
    ap.add_argument("--warmup", type=float, default=60, help="growth is counted from the first sample after this")
    ap.add_argument("--messages", type=int, default=50, help="messages each cycle's producer sends")
    ap.add_argument("--topics", type=int, default=4)
    ap.add_argument("--groups", type=int, default=6)
    ap.add_argument("--readers", type=int, default=2, help="readerProcessNums")
    ap.add_argument("--port", type=int, default=29700)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    args.namesrv = f"127.0.0.1:{args.port + 76}"
    logging.getLogger("rocketbox.client").setLevel(logging.ERROR)   # the vanished members' failed pulls
    app = BenchAppliance("rbx-soak-", args.dir, {
        "listenPort": args.port, "brokerIP1": "127.0.0.1", "namesrvAddr": args.namesrv,
        "readerProcessNums": args.readers, "shmPrefix": f"/rbx-soak{args.port}"})
    print(f"# soak benchmark: seconds={args.seconds:g} every={args.every:g} warmup={args.warmup:g} "
          f"messages={args.messages} topics={args.topics}x{QUEUES} groups={args.groups} readers={args.readers}",
          flush=True)
    try:
        app.start(ready=app.wait_serving)
        code = asyncio.run(run(app, args))
    finally:
        app.stop()
    raise SystemExit(code)


if __name__ == "__main__":
    main()
