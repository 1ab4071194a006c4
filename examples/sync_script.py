"""The blocking API, for scripts: send, then poll what was sent, with no asyncio in sight.

    NAMESRV=127.0.0.1:9876 python examples/sync_script.py [TOPIC]
"""
import json
import os
import sys

from rocketbox import Message, SyncLitePullConsumer, SyncProducer


def main(namesrv: str, topic: str, n: int = 5) -> None:
    with SyncProducer("example-producer", namesrv) as producer:
        statuses = [producer.send(Message(topic, f"line {i}".encode())).status for i in range(n)]
    got = []
    with SyncLitePullConsumer("example-sync", namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET") as consumer:
        consumer.subscribe(topic).start()
        while len(got) < n and (msgs := consumer.poll(timeout_s=30)):
            got += [m.body.decode() for m in msgs]
    print(json.dumps({"sent": statuses, "received": sorted(got)}))


if __name__ == "__main__":
    main(os.environ.get("NAMESRV", "127.0.0.1:9876"), (sys.argv[1:] or ["ExampleSync"])[0])
