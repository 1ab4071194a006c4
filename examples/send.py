"""Send one message three ways: waiting for the broker's answer, as a task, and oneway.

    NAMESRV=127.0.0.1:9876 python examples/send.py [TOPIC]
"""
import asyncio
import json
import os
import sys

from rocketbox import Message, Producer


async def main(namesrv: str, topic: str) -> None:
    async with Producer("example-producer", namesrv) as producer:
        result = await producer.send(Message(topic, b"hello", tags="TagA", keys=["order-1"]))
        task = producer.send_async(Message(topic, b"hello again", tags="TagA"))
        await producer.send_oneway(Message(topic, b"fire and forget", tags="TagB"))
        print(json.dumps({"sync": result.status, "async": (await task).status, "msg_id": result.msg_id,
                          "queue": result.queue.queue_id, "offset": result.queue_offset}))


if __name__ == "__main__":
    asyncio.run(main(os.environ.get("NAMESRV", "127.0.0.1:9876"), (sys.argv[1:] or ["ExampleSend"])[0]))
