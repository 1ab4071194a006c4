"""Send messages, and consume them with a push consumer: the client pulls the group's share of the
topic's queues and hands each batch to the listener; True means consumed.

    NAMESRV=127.0.0.1:9876 python examples/push.py [TOPIC]
"""
import asyncio
import json
import os
import sys

from rocketbox import Message, MessageExt, Producer, PushConsumer


async def main(namesrv: str, topic: str, n: int = 20) -> None:
    async with Producer("example-producer", namesrv) as producer:
        for i in range(n):
            await producer.send(Message(topic, f"message {i}".encode(), tags="TagA" if i % 2 else "TagB"))
    got: list[str] = []
    done = asyncio.Event()

    def listener(msgs: list[MessageExt]) -> bool:
        got.extend(m.body.decode() for m in msgs)
        if len(got) >= n // 2:
            done.set()
        return True

    consumer = PushConsumer("example-push", namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET")
    await consumer.subscribe(topic, "TagA").register(listener).start()     # the odd ones only
    await asyncio.wait_for(done.wait(), 120)
    await consumer.shutdown()
    print(json.dumps({"received": sorted(got, key=lambda b: int(b.split()[1]))}))


if __name__ == "__main__":
    asyncio.run(main(os.environ.get("NAMESRV", "127.0.0.1:9876"), (sys.argv[1:] or ["ExamplePush"])[0]))
