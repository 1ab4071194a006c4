"""Run by tests/integration/test_grpc.py with ``PYTHONPATH=<venv>/rocketmq5``: the official RocketMQ
5.x Python client's PushConsumer (QueryAssignment, then receives), and what it consumed, a line each.

    push.py ENDPOINT TOPIC GROUP N
    -> "consumed <body> <attempt>" for each delivery, until N messages were consumed (30 s at most);
       the message whose body ends in "-0" fails its first delivery (FAILURE), so it comes again
       after the group's first back-off, its attempt counted
"""
import sys
import threading
import time

from rocketmq import ClientConfiguration, ConsumeResult, Credentials, FilterExpression, MessageListener, PushConsumer

done: set = set()
lock = threading.Lock()


class Listener(MessageListener):
    def consume(self, message):
        body = message.body.decode()
        with lock:                         # (listeners run on several threads: one whole line each)
            sys.stdout.write(f"consumed {body} {message.delivery_attempt}\n")
            sys.stdout.flush()
        if body.endswith("-0") and message.delivery_attempt == 1:
            return ConsumeResult.FAILURE
        with lock:
            done.add(body)
        return ConsumeResult.SUCCESS


def main() -> int:
    endpoint, topic, group, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    consumer = PushConsumer(ClientConfiguration(endpoint, Credentials()), group, Listener(), {topic: FilterExpression()})
    consumer.startup()
    try:
        deadline = time.monotonic() + 30
        while len(done) < n and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1)                      # (the last acks on their way)
    finally:
        consumer.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
