"""Delayed messages: a delay level (the broker's messageDelayLevel: level 1 is 1 s by default),
and a timer to any time (RocketMQ 5.x's setDelayTimeMs; a 4.x broker delivers it at once).

    NAMESRV=127.0.0.1:9876 python examples/delay.py [TOPIC]
"""
import asyncio
import json
import os
import sys
import time

from rocketbox import Message, MessageExt, Producer, PushConsumer


async def main(namesrv: str, topic: str) -> None:
    arrived: dict[str, float] = {}
    done = asyncio.Event()

    def listener(msgs: list[MessageExt]) -> bool:
        for m in msgs:
            arrived[m.body.decode()] = time.monotonic()
        if len(arrived) >= 3:
            done.set()
        return True

    async with Producer("example-producer", namesrv) as producer:
        await producer.send(Message(topic, b"warm-up"))         # the topic exists before the consumer starts
        consumer = PushConsumer("example-delay", namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET")
        await consumer.subscribe(topic).register(listener).start()
        sent = time.monotonic()
        await producer.send(Message(topic, b"level", delay_level=1))
        await producer.send(Message(topic, b"timer", delay_ms=3000))
    await asyncio.wait_for(done.wait(), 120)
    await consumer.shutdown()
    print(json.dumps({k: round(arrived[k] - sent, 2) for k in ("level", "timer")}))


if __name__ == "__main__":
    asyncio.run(main(os.environ.get("NAMESRV", "127.0.0.1:9876"), (sys.argv[1:] or ["ExampleDelay"])[0]))
