"""Broadcasting: every member of the group gets every message (offsets kept by each member).

    NAMESRV=127.0.0.1:9876 python examples/broadcast.py [TOPIC]
"""
import asyncio
import json
import os
import sys
import tempfile

from rocketbox import Message, MessageExt, Producer, PushConsumer


async def main(namesrv: str, topic: str, n: int = 10) -> None:
    async with Producer("example-producer", namesrv) as producer:
        await producer.send(Message(topic, b"message 0"))              # the topic exists before the members start
        got: dict[str, list[str]] = {"a": [], "b": []}
        done = asyncio.Event()
        members = []
        for name in got:
            def listener(msgs: list[MessageExt], name: str = name) -> bool:
                got[name] += [m.body.decode() for m in msgs]
                if all(len(v) >= n for v in got.values()):
                    done.set()
                return True
            member = PushConsumer("example-broadcast", namesrv, model="BROADCASTING",
                                  consume_from="CONSUME_FROM_FIRST_OFFSET", offset_dir=tempfile.mkdtemp())
            members.append(await member.subscribe(topic).register(listener).start())
        for i in range(1, n):
            await producer.send(Message(topic, f"message {i}".encode()))
    await asyncio.wait_for(done.wait(), 120)
    for member in members:
        await member.shutdown()
    print(json.dumps({name: len(set(v)) for name, v in got.items()}))


if __name__ == "__main__":
    asyncio.run(main(os.environ.get("NAMESRV", "127.0.0.1:9876"), (sys.argv[1:] or ["ExampleBroadcast"])[0]))
