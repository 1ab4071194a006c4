"""Send ten messages of one topic in one request (a batch: no delays, one topic).

    NAMESRV=127.0.0.1:9876 python examples/batch.py [TOPIC]
"""
import asyncio
import json
import os
import sys

from rocketbox import Message, Producer


async def main(namesrv: str, topic: str) -> None:
    async with Producer("example-producer", namesrv) as producer:
        result = await producer.send_batch([Message(topic, f"item {i}".encode(), tags="Batch") for i in range(10)])
        print(json.dumps({"status": result.status, "ids": len(result.msg_id.split(",")),
                          "first_offset": result.queue_offset}))


if __name__ == "__main__":
    asyncio.run(main(os.environ.get("NAMESRV", "127.0.0.1:9876"), (sys.argv[1:] or ["ExampleBatch"])[0]))
