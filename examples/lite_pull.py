"""The lite pull consumer: messages are pulled in the background, and poll() takes them when the
application is ready; offsets move as messages are polled and are committed every 5 s.

    NAMESRV=127.0.0.1:9876 python examples/lite_pull.py [TOPIC]
"""
import asyncio
import json
import os
import sys

from rocketbox import LitePullConsumer, Message, Producer


async def main(namesrv: str, topic: str, n: int = 15) -> None:
    async with Producer("example-producer", namesrv) as producer:
        for i in range(n):
            await producer.send(Message(topic, f"message {i}".encode()))
    consumer = LitePullConsumer("example-lite", namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET", auto_commit=False)
    await consumer.subscribe(topic).start()
    got: list[str] = []
    while len(got) < n:
        msgs = await consumer.poll(timeout_s=30)
        if not msgs:
            break
        got += [m.body.decode() for m in msgs]
        await consumer.commit()                   # (auto_commit=True would commit every 5 s)
    await consumer.shutdown()
    print(json.dumps({"received": sorted(got, key=lambda b: int(b.split()[1]))}))


if __name__ == "__main__":
    asyncio.run(main(os.environ.get("NAMESRV", "127.0.0.1:9876"), (sys.argv[1:] or ["ExampleLitePull"])[0]))
