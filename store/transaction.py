"""Transactional messages in the store (FACTS §9.3, FACTS-wave2 §4; broker:transaction/queue/
TransactionalMessageBridge.java): the names and records the send path, END_TRANSACTION, the
writer's ledger and recovery share.

- A **half message** (``TRAN_MSG=true``) is stored in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0, its
  real topic and queue in ``REAL_TOPIC`` / ``REAL_QID``, its transaction bits cleared (so it takes
  a queue offset there), invisible to consumers of the real topic.
- **Commit** stores it again in its real topic and queue, transaction bits COMMIT,
  ``preparedTransactionOffset`` = the half's CommitLog offset, properties as the half's (4.9.8
  writes the properties string before it drops ``REAL_TOPIC``, ``REAL_QID`` and ``TRAN_MSG``).
- An **op record** ends the half: ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0, tag ``d``, body the
  half's queue offset in decimal. A commit is the committed message then its op record, one
  TX_END entry; a rollback is the op record alone.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from rocketbox.store import message

if TYPE_CHECKING:
    from rocketbox.store.view import StoreView

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
HALF_TOPIC_BYTES = HALF_TOPIC.encode()
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
TRAN_MSG, PGROUP, REAL_TOPIC, REAL_QID = b"TRAN_MSG", b"PGROUP", b"REAL_TOPIC", b"REAL_QID"
OP_TAG = b"d"
OP_PROPERTIES = b"TAGS" + message.NAME_VALUE_SEP.encode() + OP_TAG
NOT_TYPE, COMMIT, ROLLBACK = 0, message.TX_COMMIT, message.TX_ROLLBACK   # END_TRANSACTION's commitOrRollback


def is_half(props: bytes) -> bool:
    """A transactional half message: its TRAN_MSG property is true (Java's Boolean.parseBoolean;
    the broker goes by the property, not the sysflag)."""
    v = message.property_value(props, TRAN_MSG)
    return v is not None and v.lower() == b"true"


def half_properties(props: bytes, topic: str, queue_id: int) -> bytes:
    """A half message's stored properties: as sent, with its real topic and queue."""
    return message.with_properties(props, {REAL_TOPIC: topic.encode(), REAL_QID: b"%d" % queue_id})


def op_record(half_offset: int, host_ip: bytes, host_port: int, now_ms: int) -> bytes:
    """The op record that ends the half at queue offset ``half_offset`` (born and stored by the
    broker itself, as 4.9.8's ``makeOpMessageInner``)."""
    return message.encode_record(topic=OP_TOPIC.encode(), queue_id=0, body=b"%d" % half_offset,
                                 properties=OP_PROPERTIES, born_ts=now_ms, born_ip=host_ip, born_port=host_port,
                                 store_ip=host_ip, store_port=host_port)


def committed_record(head: message.Header, body: bytes, props: bytes, half_phys: int) -> bytes:
    """The half message (its stored header, body and properties) as committed: in its real
    topic and queue, transaction bits COMMIT, prepared offset the half's CommitLog offset."""
    topic = message.property_value(props, REAL_TOPIC) or b""
    qid = int(message.property_value(props, REAL_QID) or b"0")
    sys_flag = (head.sys_flag & ~message.TX_MASK) | message.TX_COMMIT
    return message.encode_record(topic=topic, queue_id=qid, body=body, properties=props, flag=head.flag,
                                 sys_flag=sys_flag, born_ts=head.born_ts, born_ip=head.born_ip,
                                 born_port=head.born_port, store_ip=head.store_ip, store_port=head.store_port,
                                 reconsume_times=head.reconsume_times, prepared_offset=half_phys)


def check_record(head: message.Header, body: bytes, props: bytes) -> bytes:
    """CHECK_TRANSACTION_STATE's body: the half message as its producer sent it, in its real topic
    and queue (what Java's client decodes with MessageDecoder.decode)."""
    topic = message.property_value(props, REAL_TOPIC) or b""
    qid = int(message.property_value(props, REAL_QID) or b"0")
    return message.encode_record(topic=topic, queue_id=qid, body=body, properties=props, flag=head.flag,
                                 sys_flag=head.sys_flag, born_ts=head.born_ts, born_ip=head.born_ip,
                                 born_port=head.born_port, store_ip=head.store_ip, store_port=head.store_port,
                                 reconsume_times=head.reconsume_times, queue_offset=head.queue_offset,
                                 phys_offset=head.phys_offset, store_ts=head.store_ts)


def op_half_offset(body: bytes) -> int | None:
    """The half offset an op record's body names, or None if it names none."""
    try:
        return int(body)
    except ValueError:
        return None


def op_halves(view: StoreView, start: int = 0) -> Iterator[tuple[int, int | None]]:
    """(its queue offset, the half offset it ends) of each op record from ``start`` (at least the
    op queue's first) to the queue's end; None for one that does not read as an op record."""
    lo, hi = view.offsets(OP_TOPIC, 0) or (0, 0)
    at = max(start, lo)
    for entries in view.queue_entries(OP_TOPIC, 0, at, hi):
        for phys, size in zip(entries["phys"].tolist(), entries["size"].tolist()):
            s = view.stored(phys, size)
            yield at, None if s is None else op_half_offset(s.body)
            at += 1
