"""What group churn costs: duplicate deliveries and settle times while consumers come and go.

RocketMQ's CLUSTERING consumption is at-least-once: when a queue moves to another member, the new
owner starts from the offset last committed, so what the old owner consumed after that is
delivered again, and a queue two members both think is theirs is consumed twice for as long as
they disagree.  This measures how much of that the appliance and the Python client leave.

One appliance (name server, readers, HAProxy), one topic of ``--queues`` queues, ``--groups``
groups of ``--members`` push consumers each (each its own client instance and connections), all in
this process.  All members start at once (the join storm), then ``--messages`` messages are sent
in concurrent bursts of 50; two seconds in, half of each group's members leave, a second after
they have, two new members join each group.  Printed: how long until every group owned each queue
exactly once after each step and how long after the last send every group had every message, then
per group what was received, missing and delivered twice.
With ``--orderly`` the members are orderly consumers (queue locks on the broker), which hand a
queue over only once its last batch is consumed and committed: nothing should come twice.

    .venv/bin/python -m bench.rebalance [--groups 8] [--members 6] [--queues 16] [--messages 20000] [--orderly]
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import time

from bench.appliance import BenchAppliance
from bench.e2e import create_topic
from rocketbox.client.consumer import PushConsumer
from rocketbox.client.message import Message
from rocketbox.client.producer import Producer

TOPIC = "Churn"


class Churn:
    def __init__(self, namesrv: str, groups: int, queues: int, orderly: bool):
        self.namesrv, self.queues, self.orderly = namesrv, queues, orderly
        self.seen = [collections.Counter() for _ in range(groups)]
        self.members: list[list[PushConsumer]] = [[] for _ in range(groups)]

    def member(self, g: int) -> PushConsumer:
        c = PushConsumer(f"churn{g}", self.namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET", orderly=self.orderly)
        c.subscribe(TOPIC).register(lambda msgs, seen=self.seen[g]: seen.update(m.body for m in msgs) or True)
        return c

    async def join(self, per_group: int) -> None:
        new = [(g, self.member(g)) for g in range(len(self.members)) for _ in range(per_group)]
        await asyncio.gather(*(c.start() for _, c in new))
        for g, c in new:
            self.members[g].append(c)

    async def leave(self, per_group: int) -> None:
        gone = [cs.pop() for cs in self.members for _ in range(min(per_group, len(cs)))]
        await asyncio.gather(*(c.shutdown() for c in gone))

    def unsettled(self) -> int:
        """Groups in which some queue has no owner or more than one."""
        bad = 0
        for cs in self.members:
            owned = [q for c in cs for q in c.pullers if not q.topic.startswith("%RETRY%")]   # (not its retry topic)
            bad += len(owned) != self.queues or len(set(owned)) != self.queues
        return bad

    async def settle_time(self, limit: float = 60.0) -> float | None:
        t0 = time.monotonic()
        while self.unsettled():
            if time.monotonic() - t0 > limit:
                return None
            await asyncio.sleep(0.05)
        return time.monotonic() - t0


async def run(args) -> int:
    churn = Churn(args.namesrv, args.groups, args.queues, args.orderly)
    producer = await Producer("churn-producer", args.namesrv).start()
    sent: list[bytes] = []

    async def produce() -> None:
        for lo in range(0, args.messages, 50):
            bodies = [b"m%d" % i for i in range(lo, min(args.messages, lo + 50))]
            results = await asyncio.gather(*(producer.send(Message(TOPIC, b)) for b in bodies))
            sent.extend(b for b, r in zip(bodies, results) if r.status == "SEND_OK")

    def settled(what: str, took: float | None) -> None:
        print(f"{what:<44} {'not settled after 60 s' if took is None else f'settled in {took:.2f} s'}", flush=True)

    t0 = time.monotonic()
    await churn.join(args.members)
    settled(f"{args.groups * args.members} members joined at once ({time.monotonic() - t0:.2f} s)",
            await churn.settle_time())
    sending = asyncio.create_task(produce())

    def during() -> str:
        return "" if sending.done() else " while sending"
    await asyncio.sleep(2)
    t0 = time.monotonic()
    await churn.leave(args.members // 2)
    settled(f"{args.groups * (args.members // 2)} left{during()} ({time.monotonic() - t0:.2f} s)",
            await churn.settle_time())
    await asyncio.sleep(1)
    t0 = time.monotonic()
    await churn.join(2)
    settled(f"{args.groups * 2} joined{during()} ({time.monotonic() - t0:.2f} s)", await churn.settle_time())
    await sending
    want, t0 = set(sent), time.monotonic()
    while time.monotonic() < t0 + 60 and not all(want <= set(s) for s in churn.seen):
        await asyncio.sleep(0.05)
    print(f"{'every group had every message':<44} {time.monotonic() - t0:.2f} s after the last send", flush=True)
    await asyncio.sleep(1)                        # (late duplicates)
    print(f"{'group':<10} {'received':>10} {'missing':>8} {'twice':>8}")
    lost = 0
    for g, seen in enumerate(churn.seen):
        missing = len(want - set(seen))
        twice = sum(n - 1 for b, n in seen.items() if n > 1 and b in want)
        lost += missing
        print(f"churn{g:<5} {len(want) - missing:>10} {missing:>8} {twice:>8}")
    print(f"# {len(sent)} of {args.messages} sends acknowledged; every group should receive each of them")
    await asyncio.gather(*(c.shutdown() for cs in churn.members for c in cs))
    await producer.shutdown()
    return 1 if lost or len(sent) != args.messages else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--members", type=int, default=6, help="members of each group at first")
    ap.add_argument("--queues", type=int, default=16)
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--readers", type=int, default=2, help="readerProcessNums")
    ap.add_argument("--orderly", action="store_true", help="orderly consumers (queue locks on the broker)")
    ap.add_argument("--port", type=int, default=29600)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    args.namesrv = f"127.0.0.1:{args.port + 76}"
    app = BenchAppliance("rbx-rebalance-", args.dir, {
        "listenPort": args.port, "brokerIP1": "127.0.0.1", "namesrvAddr": args.namesrv,
        "readerProcessNums": args.readers, "shmPrefix": f"/rbx-rb{args.port}"})
    print(f"# rebalance benchmark: groups={args.groups} members={args.members} queues={args.queues} "
          f"messages={args.messages} readers={args.readers} orderly={args.orderly}", flush=True)
    try:
        app.start(ready=app.wait_serving)
        create_topic(args.port, TOPIC, args.queues)
        code = asyncio.run(run(args))
    finally:
        app.stop()
    raise SystemExit(code)


if __name__ == "__main__":
    main()
