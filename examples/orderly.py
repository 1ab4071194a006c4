"""An orderly consumer: each queue's messages reach the listener one batch at a time, in the
queue's order, and (clustering) only on the member that holds the queue's lock on the broker.
With ordered sends, each order's steps are consumed in the order they were sent.

    NAMESRV=127.0.0.1:9876 python examples/orderly.py [TOPIC]
"""
import asyncio
import json
import os
import sys

from rocketbox import Message, MessageExt, MessageQueue, MQBrokerError, Producer, PushConsumer

STEPS = ("created", "paid", "shipped", "delivered")


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


async def main(namesrv: str, topic: str, orders: int = 8) -> None:
    async with Producer("example-producer", namesrv) as producer:
        for step in STEPS:
            for order_id in range(orders):
                await send_in_order(producer, Message(topic, f"{order_id} {step}".encode()), order_id)
    seen: dict[str, list[str]] = {}
    done = asyncio.Event()

    def listener(msgs: list[MessageExt]) -> bool:
        for m in msgs:
            order, step = m.body.decode().split()
            seen.setdefault(order, []).append(step)
        if sum(map(len, seen.values())) >= orders * len(STEPS):
            done.set()
        return True

    consumer = PushConsumer("example-orderly", namesrv, orderly=True, consume_from="CONSUME_FROM_FIRST_OFFSET")
    await consumer.subscribe(topic).register(listener).start()
    await asyncio.wait_for(done.wait(), 120)
    await consumer.shutdown()
    print(json.dumps({"in_order": all(s == list(STEPS) for s in seen.values()), "orders": len(seen)}))


if __name__ == "__main__":
    asyncio.run(main(os.environ.get("NAMESRV", "127.0.0.1:9876"), (sys.argv[1:] or ["ExampleOrderly"])[0]))
