"""Ordered messages: a selector sends every message of one order to the same queue, so the order's
messages are stored, and read back, in the order they were sent.

    NAMESRV=127.0.0.1:9876 python examples/ordered.py [TOPIC]
"""
import asyncio
import json
import os
import sys

from rocketbox import Message, MessageQueue, Producer, PullConsumer


def by_order(queues: list[MessageQueue], _msg: Message, order_id: int) -> MessageQueue:
    return queues[order_id % len(queues)]


async def main(namesrv: str, topic: str) -> None:
    async with Producer("example-producer", namesrv) as producer:
        for step in ("created", "paid", "shipped", "delivered"):
            for order_id in range(6):
                await producer.send(Message(topic, f"order {order_id} {step}".encode(), keys=[f"order-{order_id}"]),
                                    selector=by_order, arg=order_id)
    consumer = await PullConsumer("example-ordered", namesrv).start()
    steps: dict[str, list[str]] = {}
    queue_of: dict[str, set[int]] = {}
    queues = await consumer.queues(topic)
    await consumer.assign(queues)
    for _ in range(100):                          # (a broker makes a message pullable a moment after its send)
        if sum(map(len, steps.values())) >= 24:
            break
        await asyncio.sleep(0.05)
        for mq in queues:
            while True:
                result = await consumer.pull(mq, max_nums=32)
                for m in result.messages:
                    _, order, step = m.body.decode().split()
                    steps.setdefault(order, []).append(step)
                    queue_of.setdefault(order, set()).add(mq.queue_id)
                if result.status == "NO_NEW_MSG":
                    break
    await consumer.shutdown()
    print(json.dumps({"steps": steps, "queues_per_order": sorted({len(q) for q in queue_of.values()})}))


if __name__ == "__main__":
    asyncio.run(main(os.environ.get("NAMESRV", "127.0.0.1:9876"), (sys.argv[1:] or ["ExampleOrdered"])[0]))
