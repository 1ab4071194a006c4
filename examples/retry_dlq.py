"""Retry and dead letters: a message the listener refuses comes back through the group's retry
topic after a back-off (delay level 3 + the times it was tried); past max_reconsume_times it goes
to the group's dead-letter topic, %DLQ%<group>, where a pull consumer (or an operator) reads it.

    NAMESRV=127.0.0.1:9876 python examples/retry_dlq.py [TOPIC]
"""
import asyncio
import json
import os
import sys

from rocketbox import Message, MessageExt, MQClientError, Producer, PullConsumer, PushConsumer

GROUP = "example-retry"


async def main(namesrv: str, topic: str) -> None:
    tries: list[int] = []

    def listener(msgs: list[MessageExt]) -> bool:
        tries.extend(m.reconsume_times for m in msgs)
        return False                                     # refuse: try again later

    consumer = PushConsumer(GROUP, namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET", max_reconsume_times=1)
    async with Producer("example-producer", namesrv) as producer:
        await producer.send(Message(topic, b"warm-up", tags="skip"))      # the topic exists before the consumer
        await consumer.subscribe(topic, "poison").register(listener).start()
        await producer.send(Message(topic, b"poison pill", tags="poison"))
    dead = []
    puller = await PullConsumer(GROUP + "-dlq-reader", namesrv).start()
    for _ in range(120):                                 # the dead-letter topic exists once a message went there
        await asyncio.sleep(1)
        try:
            queues = await puller.queues(f"%DLQ%{GROUP}")
        except MQClientError:                            # not there yet
            continue
        await puller.assign(queues)
        for mq in queues:
            dead += [m.body.decode() for m in (await puller.pull(mq)).messages]
        if dead:
            break
    await puller.shutdown()
    await consumer.shutdown()
    print(json.dumps({"tries": tries, "dead_letters": dead}))


if __name__ == "__main__":
    asyncio.run(main(os.environ.get("NAMESRV", "127.0.0.1:9876"), (sys.argv[1:] or ["ExampleRetry"])[0]))
