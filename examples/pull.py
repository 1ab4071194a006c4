"""Pull on your own terms: take a topic's queues, start where the group committed, pull, commit.

    NAMESRV=127.0.0.1:9876 python examples/pull.py [TOPIC]
"""
import asyncio
import json
import os
import sys

from rocketbox import Message, Producer, PullConsumer


async def main(namesrv: str, topic: str, n: int = 12) -> None:
    async with Producer("example-producer", namesrv) as producer:
        for i in range(n):
            await producer.send(Message(topic, f"message {i}".encode()))
    consumer = await PullConsumer("example-pull", namesrv).start()
    queues = await consumer.queues(topic)
    await consumer.assign(queues)                 # from the group's committed offsets (0 for a new group)
    got: list[str] = []
    for _ in range(100):                          # (a broker makes a message pullable a moment after its send)
        if len(got) >= n:
            break
        await asyncio.sleep(0.05)
        for mq in queues:
            while True:
                result = await consumer.pull(mq, max_nums=4)      # from where the last pull of mq ended
                got += [m.body.decode() for m in result.messages]
                if result.status == "NO_NEW_MSG":
                    break
    await consumer.commit()                       # the group resumes after them next time
    await consumer.shutdown()
    print(json.dumps({"queues": len(queues), "received": sorted(got, key=lambda b: int(b.split()[1]))}))


if __name__ == "__main__":
    asyncio.run(main(os.environ.get("NAMESRV", "127.0.0.1:9876"), (sys.argv[1:] or ["ExamplePull"])[0]))
