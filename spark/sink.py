"""Writing a DataFrame to a topic through the broker (``df.write.format("rocketbox")`` and
``writeStream``): each Spark task sends its rows with the Python client, in batch sends of up to
``batchSize`` messages and 1 MiB of bodies (one SEND_BATCH_MESSAGE per queue), through the name server at
``namesrv``.

Options: ``namesrv`` (required), ``topic`` (required; it must exist, or the broker must
auto-create it), ``producerGroup`` (``rocketbox-spark``), ``batchSize`` (64).  Columns: ``body``
(binary or string, required), ``tags``, ``keys`` (a string, space-separated), ``properties`` (a
map), ``queueId`` (a queue of the topic; else the producer's round robin).

At least once: a task that fails after some sends is run again by Spark and sends its rows again.
A refused send fails the task with the broker's code and remark (``MQBrokerError``).
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

COLUMNS = ("body", "tags", "keys", "properties", "queueId")
BATCH_BYTES = 1 << 20          # bodies in one batch send, at most (a message itself may be larger, up to the broker's limit)


@dataclass
class Sent(WriterCommitMessage):
    messages: int


def _check(options, schema) -> None:
    for name in ("namesrv", "topic"):
        if not options.get(name):
            raise ValueError(f"option '{name}' is required to write to a topic")
    names = set(schema.fieldNames())
    if "body" not in names:
        raise ValueError(f"a DataFrame written to a topic needs a 'body' column; it has {sorted(names)}")
    unknown = names - set(COLUMNS)
    if unknown:
        raise ValueError(f"columns {sorted(unknown)} are not message fields; a row has {', '.join(COLUMNS)}")


def send_rows(options, rows) -> int:
    """Send every row of the iterator ``rows`` to the topic -> how many were sent."""
    from rocketbox.client.message import Message
    from rocketbox.client.producer import Producer

    topic, size = options["topic"], int(options.get("batchSize") or 64)

    def message(row) -> tuple[int | None, Message]:
        d = row.asDict()
        body = d["body"]
        body = body.encode() if isinstance(body, str) else bytes(body)
        props = {str(k): str(v) for k, v in (d.get("properties") or {}).items()}
        return d.get("queueId"), Message(topic, body, tags=d.get("tags"), keys=d.get("keys"), properties=props)

    async def run() -> int:
        sent = 0
        async with Producer(options.get("producerGroup") or "rocketbox-spark", options["namesrv"]) as p:
            queues = {mq.queue_id: mq for mq in (await p.instance.route(topic)).write_queues}
            pending: dict = {}
            held: dict = {}
            for row in rows:
                qid, m = message(row)
                pending.setdefault(qid, []).append(m)
                held[qid] = held.get(qid, 0) + len(m.body)
                if len(pending[qid]) >= size or held[qid] >= BATCH_BYTES:
                    sent += await _flush(p, queues, qid, pending.pop(qid))
                    held[qid] = 0
            for qid, msgs in pending.items():
                sent += await _flush(p, queues, qid, msgs)
        return sent
    return asyncio.run(run())


async def _flush(p, queues: dict, qid, msgs: list) -> int:
    if qid is not None and qid not in queues:
        raise ValueError(f"queueId {qid} is not a write queue of {msgs[0].topic} (it has {sorted(queues)})")
    await p.send_batch(msgs, queue=queues[qid] if qid is not None else None)
    return len(msgs)


class _TopicSink:
    """What the batch and the streaming writer share: the checks, then each task's rows sent."""

    def __init__(self, options, schema):
        _check(options, schema)
        self.options = options

    def write(self, iterator):
        return Sent(send_rows(self.options, iterator))


class TopicWriter(_TopicSink, DataSourceWriter):
    pass


class TopicStreamWriter(_TopicSink, DataSourceStreamWriter):
    def commit(self, messages, batchId) -> None:
        pass

    def abort(self, messages, batchId) -> None:
        pass
