"""Run by tests/integration/test_grpc.py with ``PYTHONPATH=<venv>/rocketmq5``: the official RocketMQ
5.x Python client (``rocketmq-python-client``) sends to the gRPC front, and says what happened,
a line each.

    produce.py ENDPOINT TOPIC N
    -> "sent normal <i> <message id>" x N, "sent fifo <i> <message id>" x N (message group g1),
       "sent delay 0 <message id>" (due in 2 s), "refused too late: <error>" (due in 500 days),
       "refused unknown topic: <error>"
"""
import sys
import time

from rocketmq import ClientConfiguration, Credentials, Message, Producer


def message(topic: str, body: bytes, **kw) -> Message:
    m = Message()
    m.topic, m.body = topic, body
    for k, v in kw.items():
        if k == "properties":
            for name, value in v.items():
                m.add_property(name, value)
        else:
            setattr(m, k, v)
    return m


def main() -> int:
    endpoint, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    producer = Producer(ClientConfiguration(endpoint, Credentials()), (topic,))
    producer.startup()
    try:
        for i in range(n):
            r = producer.send(message(topic, b"grpc-%d" % i, tag="TagA", keys=f"k{i}", properties={"p": str(i)}))
            print(f"sent normal {i} {r.message_id}", flush=True)
        for i in range(n):
            r = producer.send(message(topic, b"fifo-%d" % i, tag="TagF", message_group="g1"))
            print(f"sent fifo {i} {r.message_id}", flush=True)
        # (this client takes a delivery time in seconds since the epoch: it fills the Timestamp's seconds)
        r = producer.send(message(topic, b"later", tag="TagD", delivery_timestamp=int(time.time()) + 2))
        print(f"sent delay 0 {r.message_id}", flush=True)
        for what, m in (("too late", message(topic, b"x", delivery_timestamp=int(time.time()) + 500 * 86_400)),
                        ("unknown topic", message("NoSuchTopic5x", b"x"))):
            try:
                producer.send(m)
                print(f"sent {what}", flush=True)
            except Exception as e:
                print(f"refused {what}: {type(e).__name__}: {e}".replace("\n", " "), flush=True)
    finally:
        producer.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
