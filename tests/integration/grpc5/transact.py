"""Run by tests/integration/test_grpc.py with ``PYTHONPATH=<venv>/rocketmq5``: the official RocketMQ
5.x Python client's transactional producer, and what happened, a line each.

    transact.py ENDPOINT TOPIC
    -> "sent commit|rollback|open <message id>": three half messages; the first committed, the
       second rolled back, the third left open; "checked <message id> COMMIT": the broker's
       check-back of the open one, answered COMMIT (the script waits for it, 30 s at most)
"""
import sys
import threading
import time

from rocketmq import ClientConfiguration, Credentials, Message, Producer, TransactionChecker, TransactionResolution

checked = threading.Event()


class Checker(TransactionChecker):
    def check(self, message):
        print("checked", message.message_id, "COMMIT", message.body.decode(), flush=True)
        checked.set()
        return TransactionResolution.COMMIT


def main() -> int:
    endpoint, topic = sys.argv[1], sys.argv[2]
    producer = Producer(ClientConfiguration(endpoint, Credentials()), (topic,), Checker())
    producer.startup()
    try:
        for what in ("commit", "rollback", "open"):
            m = Message()
            m.topic, m.body, m.tag = topic, f"tx-{what}".encode(), "TagT"
            tx = producer.begin_transaction()
            receipt = producer.send(m, tx)
            print("sent", what, receipt.message_id, flush=True)
            if what == "commit":
                tx.commit()
            elif what == "rollback":
                tx.rollback()
        deadline = time.monotonic() + 30
        while not checked.wait(0.2) and time.monotonic() < deadline:
            pass
        time.sleep(1)                      # (its EndTransaction is on its way)
    finally:
        producer.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
