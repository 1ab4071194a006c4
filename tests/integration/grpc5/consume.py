"""Run by tests/integration/test_grpc.py with ``PYTHONPATH=<venv>/rocketmq5``: the official RocketMQ
5.x Python client's SimpleConsumer receives from the gRPC front, and says what happened, a line
each.

    consume.py ENDPOINT TOPIC GROUP TAG N [drain]
    -> "got <message id> <attempt> <tag> <body> <keys> <property p> <message group>" for each of the
       N messages of TAG (30 s invisible); "kept <message id>": the first, not acked, its invisible
       time changed to 1 s; the second's changed to 30 s ("changed <message id>"), then acked with
       the handle that gave; the rest acked;
       "again <message id> <attempt>": the kept one, received once its invisible time was over;
       not acked either, so it goes to the dead-letter queue when its attempts are used up;
       "after <n>": what one more receive got (a second later, 2 s of long polling)
    With ``drain``: the N messages received, each printed as "got ..." and acked.
"""
import sys
import time

from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer


def describe(m) -> str:
    p = m.properties.get("p", "-") if m.properties else "-"
    return (f"{m.message_id} {m.delivery_attempt} {m.tag} {m.body.decode()} {','.join(sorted(m.keys)) or '-'} {p} "
            f"{m.message_group or '-'}")


def receive_all(consumer, n: int, timeout: float, invisible_s: int) -> list:
    got, deadline = [], time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got.extend(consumer.receive(16, invisible_s) or [])
    return got


def main() -> int:
    endpoint, topic, group, tag, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
    consumer = SimpleConsumer(ClientConfiguration(endpoint, Credentials()), group, {topic: FilterExpression(tag)},
                              await_duration=2)
    consumer.startup()
    try:
        got = receive_all(consumer, n, 30, 30)
        for m in got:
            print("got", describe(m), flush=True)
        if sys.argv[6:] == ["drain"]:
            for m in got:
                consumer.ack(m)
            return 0
        kept, changed, rest = got[0], got[1], got[2:]
        print("kept", kept.message_id, flush=True)
        consumer.change_invisible_duration(kept, 1)
        consumer.change_invisible_duration(changed, 30)
        print("changed", changed.message_id, flush=True)
        consumer.ack(changed)
        for m in rest:
            consumer.ack(m)
        again = receive_all(consumer, 1, 15, 2)
        for m in again:
            print("again", m.message_id, m.delivery_attempt, flush=True)
        time.sleep(1)
        print("after", len(consumer.receive(16, 2) or []), flush=True)
    finally:
        consumer.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
