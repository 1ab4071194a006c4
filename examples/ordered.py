"""Ordered messages: a selector sends every message of one order to the same queue, so the order's
messages are stored, and read back, in the order they were sent.

    NAMESRV=127.0.0.1:9876 python examples/ordered.py [TOPIC]
"""
import asyncio
import json
import os
import sys

from rocketbox import Message, MessageQueue, MQBrokerError, Producer, PullConsumer


def by_order(queues: list[MessageQueue], _msg: Message, order_id: int) -> MessageQueue:
    return queues[order_id % len(queues)]


async def send_in_order(producer: Producer, msg: Message, order_id: int) -> None:
    """An ordered send is tried once (another queue would break the order): a broker that sheds
    load (a retriable error, such as SYSTEM_BUSY) is asked again a moment later, the same queue."""
    for attempt in range(10):
        try:
            await producer.send(msg, selector=by_order, arg=order_id)
            return
        except MQBrokerError as e:
            if not e.retriable or attempt == 9:
                raise
            await asyncio.sleep(0.2 * (attempt + 1))


async def main(namesrv: str, topic: str) -> None:
    async with Producer("example-producer", namesrv) as producer:
        for step in ("created", "paid", "shipped", "delivered"):
            for order_id in range(6):
                await send_in_order(producer, Message(topic, f"order {order_id} {step}".encode(),
                                                      keys=[f"order-{order_id}"]), order_id)
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
