"""Transactional messages: each is sent as a half message, invisible to consumers, and decided by
the local transaction that runs once it is stored: COMMIT delivers it, ROLLBACK drops it. An
UNKNOWN answer, or a producer that died before it could answer, is settled later by the broker
asking ``check`` (after ``transactionTimeOut``, every ``transactionCheckInterval``).

    NAMESRV=127.0.0.1:9876 python examples/transaction.py [TOPIC]
"""
import asyncio
import json
import os
import sys

from rocketbox import Message, MessageExt, PushConsumer, TransactionProducer

orders = {"order 1": "paid", "order 2": "cancelled", "order 3": "paid"}      # what the local database says


def local_transaction(msg: Message, order: str) -> str:
    """Runs once the half message is stored: commit the message with the order's state."""
    return "COMMIT" if orders[order] == "paid" else "ROLLBACK"


def check(msg: MessageExt) -> str:
    """The broker asks about a transaction it heard nothing of: look the order up again."""
    return "COMMIT" if orders[msg.keys[0]] == "paid" else "ROLLBACK"


async def main(namesrv: str, topic: str) -> None:
    async with TransactionProducer("example-tx-producer", namesrv, check) as producer:
        states = [(await producer.send_in_transaction(Message(topic, f"{order} {state}".encode(), keys=order),
                                                      local_transaction, order)).local_state
                  for order, state in orders.items()]
    got: list[str] = []
    done = asyncio.Event()

    def listener(msgs: list[MessageExt]) -> bool:
        got.extend(m.body.decode() for m in msgs)
        if len(got) >= 2:
            done.set()
        return True

    consumer = PushConsumer("example-tx-consumer", namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET")
    await consumer.subscribe(topic).register(listener).start()
    await asyncio.wait_for(done.wait(), 120)
    await asyncio.sleep(1)                       # a rolled-back message would arrive by now: none does
    await consumer.shutdown()
    print(json.dumps({"states": states, "received": sorted(got)}))


if __name__ == "__main__":
    asyncio.run(main(os.environ.get("NAMESRV", "127.0.0.1:9876"), (sys.argv[1:] or ["ExampleTransaction"])[0]))
